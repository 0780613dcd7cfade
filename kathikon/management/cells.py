"""Internal: how ``kathikon_ops`` shows one value in a table cell (times, ages, long text)."""

from __future__ import annotations

import datetime as dt


def when(value: dt.datetime | None) -> str | None:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else None


def age(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def clip(text: str, width: int) -> str:
    """One line of at most ``width`` characters: a table row stays one row."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 1] + "…"
