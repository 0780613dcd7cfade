"""Internal: how the management commands show values in a table (times, ages, long text,
sizes) and the table itself."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from django.template.defaultfilters import filesizeformat


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


def size(count: int) -> str:
    """Bytes as people read them (``2.1 GB``)."""
    return str(filesizeformat(count)).replace("\xa0", " ")


def table_lines(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Aligned columns, ``-`` for a missing value, ``(none)`` under an empty table."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in row]
                                           for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
             .rstrip() for row in cells]
    return lines if rows else [*lines, "(none)"]
