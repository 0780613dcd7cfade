"""Helpers for testing code that enqueues or implements Kathikon jobs (pytest or unittest).

    from kathikon.testing import assert_enqueued, drain_queue, perform_job, testing_mode

    def test_signup_sends_welcome(db):
        signup("ada@example.com")
        assert_enqueued(worker=SendWelcome, args={"email": "ada@example.com"})
        assert drain_queue("emails").completed == 1

    def test_welcome_worker():
        assert perform_job(SendWelcome, {"email": "ada@example.com"}) == "sent"

    @testing_mode("inline")          # every insert runs its job at once
    def test_inline(db): ...

Every helper runs jobs through the real executor, so outcomes, errors,
retries and signals are the ones production sees. ``testing_mode`` is also a
setting: ``KATHIKON = {"TESTING_MODE": "inline"}`` in your test settings.
The pytest plugin (``kathikon.pytest_plugin``) wraps these in fixtures.
"""

from __future__ import annotations

import datetime as dt
import functools
import inspect
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from kathikon.compat import TASK_WORKER
from kathikon.exceptions import KathikonError
from kathikon.jobspec import build_row, dump_args, worker_class
from kathikon.workers import Worker

NODE = "kathikon.testing"
MAX_ROUNDS = 1000
_CLAIM_LIMIT = 10_000


@dataclass(frozen=True)
class DrainResult:
    """How the jobs run by :func:`drain_queue` ended (counts of runs, not of jobs)."""

    completed: int = 0
    failed: int = 0
    discarded: int = 0
    snoozed: int = 0
    cancelled: int = 0


def perform_job(worker: type[Worker] | str, args: dict[str, Any] | None = None,
                **options: Any) -> Any:
    """Run ``worker.perform`` on an unsaved job, as a worker process would; touches no table.

    ``args`` go through the same JSON check as ``insert`` (so a job you could not
    insert fails here too). Options: ``queue``, ``priority``, ``max_attempts``,
    ``meta`` and ``attempt`` (the attempt number the job sees, default 1).
    Returns what ``perform`` returned; raises what it raised, and raises a
    returned ``Retry``/``Discard``/``Snooze`` too. Async workers run on the
    process's event loop with the worker's ``timeout``.
    """
    from django.utils import timezone

    from kathikon.executor import call_perform, run_job
    from kathikon.states import JobState

    attempt = options.pop("attempt", 1)
    try:  # what the job would see after a trip through the database
        args = json.loads(json.dumps(args, allow_nan=False)) if args is not None else None
    except (TypeError, ValueError):
        dump_args(args)  # raises InvalidJob naming the offending key
        raise
    row = build_row(worker, args, options)
    job = row.to_job()
    job.state, job.attempts, job.attempted_by = JobState.RUNNING, attempt, NODE
    job.started_at = timezone.now()
    returned: dict[str, Any] = {}

    def invoke(instance: Worker, running: Any) -> Any:
        returned["value"] = call_perform(instance, running, None)
        return returned["value"]

    execution = run_job(job, invoke=invoke)
    if execution.kind == "completed":
        return returned.get("value")
    assert execution.exception is not None
    raise execution.exception


def drain_queue(queue: str | None = None, *, with_scheduled: bool = False,
                with_recursion: bool = False) -> DrainResult:
    """Run the due jobs of ``queue`` (``None``: every queue) in this process, then return counts.

    ``with_scheduled``: scheduled jobs and pending retries run now too.
    ``with_recursion``: keep going until nothing is due, so jobs inserted (or
    retries scheduled, with ``with_scheduled``) by drained jobs run as well.
    Paused queues are not drained. ``cancelled`` counts jobs of the drained
    queues cancelled while the drain ran (e.g. by a drained job).
    """
    from kathikon import conf
    from kathikon.storage import vendor

    counts: Counter[str] = Counter()
    cancelled = 0
    for database in [conf.queue_database(queue)] if queue else conf.databases():
        with vendor.using(database):  # queues on several databases: each one's jobs
            cancelled += _drain_here(queue, counts, with_scheduled, with_recursion)
    return DrainResult(completed=counts["completed"], failed=counts["failed"],
                       discarded=counts["discarded"], snoozed=counts["snoozed"],
                       cancelled=max(0, cancelled))


def _drain_here(queue: str | None, counts: Counter[str], with_scheduled: bool,
                with_recursion: bool) -> int:
    """:func:`drain_queue` on this thread's database; returns the jobs cancelled meanwhile."""
    from kathikon import storage
    from kathikon.executor import Executor, settle
    from kathikon.storage import testing as store

    cancelled_before = storage.count_by_state(queue)["cancelled"]
    for _ in range(MAX_ROUNDS):
        storage.promote_scheduled()
        if with_scheduled:
            store.make_due(queue)
        names = [queue] if queue is not None else store.due_queues()
        jobs = [job for name in names for job in storage.claim_jobs(name, _CLAIM_LIMIT, NODE)]
        executor = Executor()  # a transaction perform leaves open is rolled back, as in a worker
        for job in jobs:
            execution = settle([executor.run(job)])[0]
            counts[execution.kind] += 1
            _interrupt(execution)
        if not jobs or not with_recursion:
            break
    else:
        raise KathikonError(f"drain_queue() still had jobs after {MAX_ROUNDS} rounds; "
                            "does a job snooze or re-insert itself forever?")
    return int(storage.count_by_state(queue)["cancelled"] - cancelled_before)


def all_enqueued(*, worker: type[Worker] | str | None = None, args: dict[str, Any] | None = None,
                 queue: str | None = None, priority: int | None = None,
                 scheduled_at: Any = None) -> list[Any]:
    """Jobs waiting to run (scheduled, available or retryable) that match, oldest first.

    ``args`` matches partially: every given key must be there with an equal
    value (nested dicts match partially too). ``scheduled_at`` is a datetime
    (matched within 1 second) or ``(datetime, seconds)``.
    """
    criteria = _Criteria(worker, args, queue, priority, scheduled_at)
    return [job for job in criteria.candidates() if criteria.score(job) == criteria.full]


def assert_enqueued(*, worker: type[Worker] | str | None = None,
                    args: dict[str, Any] | None = None, queue: str | None = None,
                    priority: int | None = None, scheduled_at: Any = None) -> Any:
    """Fail unless a matching job waits to run; returns the first match.

    The failure message lists the closest enqueued jobs.
    """
    criteria = _Criteria(worker, args, queue, priority, scheduled_at)
    jobs = criteria.candidates(all_workers=True)
    matches = [job for job in jobs if criteria.score(job) == criteria.full]
    if matches:
        return matches[0]
    message = f"Expected a job matching {criteria} to be enqueued"
    if not jobs:
        raise AssertionError(f"{message}, but no jobs are enqueued.")
    closest = sorted(jobs, key=criteria.score, reverse=True)[:5]
    lines = "\n".join(f"  - {_describe(job)}" for job in closest)
    raise AssertionError(f"{message}; none of the {len(jobs)} enqueued jobs matches. "
                         f"Closest:\n{lines}")


def refute_enqueued(*, worker: type[Worker] | str | None = None,
                    args: dict[str, Any] | None = None, queue: str | None = None,
                    priority: int | None = None, scheduled_at: Any = None) -> None:
    """Fail if a matching job waits to run; the message lists the matches."""
    criteria = _Criteria(worker, args, queue, priority, scheduled_at)
    matches = [job for job in criteria.candidates() if criteria.score(job) == criteria.full]
    if matches:
        lines = "\n".join(f"  - {_describe(job)}" for job in matches[:10])
        raise AssertionError(f"Expected no job matching {criteria} to be enqueued, "
                             f"found {len(matches)}:\n{lines}")


class testing_mode:  # lower case: used like a function, as override_settings is
    """Run inserts ``"inline"`` (each due job runs at once) or ``"manual"`` (only inserted).

    A context manager and a decorator (functions, async functions, TestCase
    classes). ``None`` restores normal behaviour. Same as the setting
    ``KATHIKON["TESTING_MODE"]``.
    """

    def __init__(self, mode: str | None) -> None:
        if mode not in (None, "inline", "manual"):
            raise ValueError(f"testing_mode is 'inline', 'manual' or None, not {mode!r}")
        self.mode = mode
        self._override: Any = None

    def _settings(self) -> Any:
        from django.conf import settings
        from django.test import override_settings

        return override_settings(KATHIKON={**getattr(settings, "KATHIKON", {}),
                                           "TESTING_MODE": self.mode})

    def __enter__(self) -> testing_mode:
        self._override = self._settings()
        self._override.enable()
        return self

    def __exit__(self, *exc: object) -> None:
        self._override.disable()
        self._override = None

    def __call__(self, func: Any) -> Any:
        if isinstance(func, type):
            return self._settings()(func)
        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def async_inner(*args: Any, **kwargs: Any) -> Any:
                with testing_mode(self.mode):
                    return await func(*args, **kwargs)
            return async_inner

        @functools.wraps(func)
        def inner(*args: Any, **kwargs: Any) -> Any:
            with testing_mode(self.mode):
                return func(*args, **kwargs)
        return inner


def run_inline(job: Any) -> Any:
    """Internal (``TESTING_MODE = "inline"``): run a just-inserted job now if it is due."""
    from kathikon import storage
    from kathikon.executor import execute_job
    from kathikon.states import JobState

    if job.state != JobState.AVAILABLE:
        return job  # scheduled for later: left for drain_queue(with_scheduled=True)
    execution = execute_job(storage.claim_job(job.id, NODE))
    _interrupt(execution)
    return execution.job


def _interrupt(execution: Any) -> None:
    """Ctrl-C still stops a test run: ``KeyboardInterrupt`` from ``perform`` is re-raised, once
    its failed attempt is recorded (``SystemExit`` and the rest are only recorded)."""
    if isinstance(execution.exception, KeyboardInterrupt):
        raise execution.exception


class _Criteria:
    def __init__(self, worker: Any, args: Any, queue: Any, priority: Any, when: Any) -> None:
        self.worker = worker if worker is None or isinstance(worker, str) else (
            worker_class(worker)[0])
        self.args, self.queue, self.priority = args, queue, priority
        self.when = when if when is None or isinstance(when, tuple) else (when, 1.0)
        self.full = 4 + 1 + 1 + 1 + 1

    def candidates(self, *, all_workers: bool = False) -> list[Any]:
        from kathikon import conf
        from kathikon.storage import testing as store
        from kathikon.storage import vendor

        every_worker = all_workers or self.worker == TASK_WORKER
        queue = None if all_workers else self.queue
        found: list[Any] = []
        for database in [conf.queue_database(queue)] if queue else conf.databases():
            with vendor.using(database):  # queues on several databases: each one's jobs
                found += store.pending_jobs(worker=None if every_worker else self.worker,
                                            queue=queue)
        return found

    def worker_matches(self, job: Any) -> bool:
        """The worker asked for; ``kathikon.backends.TaskWorker`` matches every Django Task's
        job (their worker column holds the task's path)."""
        if self.worker is None or job.worker == self.worker:
            return True
        if self.worker != TASK_WORKER:
            return False
        try:
            return worker_class(job.worker)[1] is worker_class(TASK_WORKER)[1]
        except Exception:  # a worker this process cannot import: not known to be a task's
            return False

    def score(self, job: Any) -> float:
        """8 when every criterion holds; partial credit ranks the closest jobs."""
        score = 0.0
        score += 4 if self.worker_matches(job) else 0
        score += 1 if self.queue is None or job.queue == self.queue else 0
        score += 1 if self.priority is None or job.priority == self.priority else 0
        score += 1 if self.when is None or _near(job, *self.when) else 0
        if self.args is None or _contains(job.args, self.args):
            score += 1
        elif isinstance(self.args, dict) and self.args:
            score += 0.9 * sum(key in job.args and _contains(job.args[key], value)
                               for key, value in self.args.items()) / len(self.args)
        return score

    def __str__(self) -> str:
        given = [("worker", self.worker), ("args", self.args), ("queue", self.queue),
                 ("priority", self.priority),
                 ("scheduled_at", self.when and self.when[0])]
        return ", ".join(f"{name}={value!r}" for name, value in given if value is not None) or (
            "anything")


def _contains(actual: Any, expected: Any) -> bool:
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            key in actual and _contains(actual[key], value) for key, value in expected.items())
    return bool(actual == expected)


def _near(job: Any, when: dt.datetime, seconds: float) -> bool:
    at = job.scheduled_at or job.available_at
    return at is not None and abs((at - when).total_seconds()) <= seconds


def _describe(job: Any) -> str:
    at = job.scheduled_at.isoformat() if job.scheduled_at else None
    return (f"{job.worker} queue={job.queue!r} priority={job.priority} args={job.args!r} "
            f"state={job.state} scheduled_at={at}")


__all__ = ["DrainResult", "all_enqueued", "assert_enqueued", "drain_queue", "perform_job",
           "refute_enqueued", "testing_mode"]
