"""Telemetry helpers: log every Kathikon signal through the ``kathikon`` logger.

    from kathikon import telemetry
    telemetry.attach_default_logger()           # INFO; failures at WARNING

When the ``kathikon`` logger has no handler anywhere up its chain (a default
Django project configures none for it), the first call also attaches a stderr
handler to ``kathikon``; and when its effective level is above ``level`` (the
root logger's WARNING, by default) it sets ``kathikon``'s level to ``level``,
so the lines show up. A project's own handlers are kept.
"""

from __future__ import annotations

import logging
from typing import Any

from kathikon import signals

logger = logging.getLogger("kathikon")
_WARNING = {"job_failed", "job_discarded", "job_rescued"}
_attached: dict[str, Any] = {}
_added: dict[str, Any] = {}  # the stderr handler (and level) we set, if any


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
    """Log every signal (idempotent); failures, discards and rescues at WARNING.

    Adds a stderr handler only when no handler would print these records, and
    lowers the ``kathikon`` logger's level to ``level`` when needed;
    ``detach_default_logger`` undoes both.
    """
    if not logger.hasHandlers() and "stderr" not in _added:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logger.addHandler(handler)
        _added["stderr"] = handler
    if logger.getEffectiveLevel() > level:  # e.g. WARNING inherited from the root logger
        _added.setdefault("level", logger.level)
        logger.setLevel(level)
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
    handler = _added.pop("stderr", None)
    if handler is not None:
        logger.removeHandler(handler)
    previous = _added.pop("level", None)
    if previous is not None:
        logger.setLevel(previous)
