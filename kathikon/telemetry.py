"""Telemetry helpers: log every Kathikon signal through the ``kathikon`` logger.

    from kathikon import telemetry
    telemetry.attach_default_logger()           # INFO; failures at WARNING
"""

from __future__ import annotations

import logging
from typing import Any

from kathikon import signals

logger = logging.getLogger("kathikon")
_WARNING = {"job_failed", "job_discarded", "job_rescued"}
_attached: dict[str, Any] = {}


def _describe(kwargs: dict[str, Any]) -> str:
    parts = []
    job = kwargs.get("job")
    if job is not None:
        parts.append(f"job={job.id.hex} worker={job.worker} queue={job.queue} "
                     f"attempt={job.attempts}/{job.max_attempts}")
    for key in ("duration", "queue_time"):
        if kwargs.get(key) is not None:
            parts.append(f"{key}={kwargs[key]:.3f}s")
    for key in ("queue", "node", "seconds", "state"):
        if kwargs.get(key) is not None:
            parts.append(f"{key}={kwargs[key]}")
    error = kwargs.get("error")
    if error:
        parts.append(f"error={error.get('kind')}: {error.get('message')}")
    return " ".join(parts)


def attach_default_logger(level: int = logging.INFO) -> None:
    """Log every signal (idempotent); failures, discards and rescues at WARNING."""
    for name, signal in signals.ALL_SIGNALS.items():
        if name in _attached:
            continue

        def receiver(sender: Any, *, _name: str = name, **kwargs: Any) -> None:
            event_level = logging.WARNING if _name in _WARNING else level
            logger.log(event_level, "%s %s", _name, _describe(kwargs),
                       extra={"kathikon_event": _name})

        signal.connect(receiver, weak=False, dispatch_uid=f"kathikon.telemetry.{name}")
        _attached[name] = receiver


def detach_default_logger() -> None:
    for name in list(_attached):
        signals.ALL_SIGNALS[name].disconnect(dispatch_uid=f"kathikon.telemetry.{name}")
        del _attached[name]
