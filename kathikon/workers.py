"""The Worker base class and the outcomes a worker returns or raises.

    class Webhook(kathikon.Worker):
        queue = "webhooks"
        max_attempts = 10
        timeout = 30

        def perform(self, job):
            post(job.args["url"])           # returns → completed
            # raise kathikon.Retry("busy")  → retryable (or dead at max_attempts)
            # return kathikon.Discard("bad")→ dead now
            # return kathikon.Snooze(60)    → scheduled in 60 s, attempt not counted
"""

from __future__ import annotations

import datetime as dt
from importlib import import_module
from typing import TYPE_CHECKING, Any, ClassVar

from kathikon import compat
from kathikon.backoff import backoff_seconds
from kathikon.exceptions import InvalidJob
from kathikon.storable import valid_delay

if TYPE_CHECKING:
    from kathikon.models import Job


class Outcome(Exception):
    """Base of the outcomes a worker may return or raise; not a ``KathikonError``."""


class Retry(Outcome):
    """Fail this attempt and retry with backoff (or die at ``max_attempts``).

    ``in_seconds`` replaces the backoff: a number >= 0 (``ValueError`` for NaN,
    infinities and anything else), clamped to ``MAX_DELAY`` (365 days).
    """

    def __init__(self, reason: object = "retry requested", *, in_seconds: float | None = None):
        super().__init__(str(reason))
        self.reason = reason
        self.in_seconds = None if in_seconds is None else valid_delay(in_seconds, "Retry")


class Discard(Outcome):
    """Give up now: the job becomes ``dead`` with this reason recorded."""

    def __init__(self, reason: object = "discarded"):
        super().__init__(str(reason))
        self.reason = reason


class Snooze(Outcome):
    """Run again after ``seconds``; the attempt is not counted.

    ``seconds``: a number >= 0 (``ValueError`` for NaN, infinities and anything
    else), clamped to ``MAX_DELAY`` (365 days).
    """

    def __init__(self, seconds: float):
        seconds = valid_delay(seconds, "Snooze")
        super().__init__(f"snoozed for {seconds}s")
        self.seconds = seconds


class Worker:
    """Base class for job workers: subclass it and implement ``perform(job)``.

    Class attributes give the defaults of jobs inserted for this worker:
    ``queue`` ("default"), ``priority`` (0), ``max_attempts`` (the
    ``MAX_ATTEMPTS`` setting), ``timeout`` (seconds or a ``timedelta``,
    ``None`` = no limit), ``unique`` (a ``kathikon.Unique``; ``None`` = no
    uniqueness). Override ``backoff(job)`` to change the delay before a retry,
    ``timeout_for(job)`` to give one job a different limit.
    """

    queue: ClassVar[str] = "default"
    priority: ClassVar[int] = 0
    max_attempts: ClassVar[int | None] = None
    timeout: ClassVar[float | dt.timedelta | None] = None
    #: ``kathikon.Unique`` (or True, or a dict of its fields): at most one such job at a time.
    unique: ClassVar[Any] = None

    def perform(self, job: Job) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.perform(job) is not implemented")

    @classmethod
    def timeout_for(cls, job: Job) -> float | dt.timedelta | None:
        """The time limit of this attempt (the one place the runtime reads it)."""
        return cls.timeout

    def backoff(self, job: Job) -> float:
        """Seconds to wait before the next attempt, before jitter.

        Clamped to ``0 .. MAX_DELAY`` (365 days); NaN or a non-number falls back
        to the default backoff (logged).
        """
        return backoff_seconds(job.attempts)

    @classmethod
    def path(cls) -> str:
        return f"{cls.__module__}.{cls.__qualname__}"


def resolve_worker(path: str) -> type[Worker]:
    """Import the Worker class at ``path``; ``InvalidJob`` saying why if it is not one."""
    module_name, _, attr = path.rpartition(".")
    if not module_name:
        raise InvalidJob(f"unknown worker {path!r}: not a dotted path", key="worker")
    missing = object()
    try:
        target: Any = import_module(module_name)
    except (ImportError, ValueError, TypeError):
        # The class may be nested (module.Outer.Inner): walk up the path.
        parts = path.split(".")
        for split in range(len(parts) - 1, 0, -1):
            try:
                target = import_module(".".join(parts[:split]))
            except (ImportError, ValueError, TypeError):
                continue
            module_name = ".".join(parts[:split])
            for name in parts[split:]:
                target = getattr(target, name, missing)
            break
        else:
            raise InvalidJob(f"unknown worker {path!r}: module not found", key="worker") from None
    else:
        target = getattr(target, attr, missing)
    if target is missing:
        raise InvalidJob(f"unknown worker {path!r}: module {module_name!r} has no such name",
                         key="worker")
    if not (isinstance(target, type) and issubclass(target, Worker)):
        if is_task(target):  # a Django Task's path: the backend's worker runs it
            return resolve_worker(compat.TASK_WORKER)
        raise InvalidJob(f"unknown worker {path!r}: not a kathikon.Worker subclass (nor a Django "
                         "Task)", key="worker")
    return target


def is_task(target: Any) -> bool:
    """Whether ``target`` is a Django Task (``@task``), when the Tasks framework is there."""
    return compat.AVAILABLE and isinstance(target, compat.Task)
