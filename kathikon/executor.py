"""Internal: run one claimed job and turn what ``perform`` did into one fenced ack.

``execute_job(job)`` is the one path from a claimed job to its outcome; the
runtime uses its two halves, :class:`Executor` (user code, no database writes:
one claimed job in, one :class:`Execution` out, whatever ``perform`` did) and
``settle`` (one ``write_acks`` call for a whole batch of runs, then signals), so
that a burst of completions costs one statement. ``settle`` itself is
``record`` (the write: it changes nothing when it raises, so it may be
retried) followed by ``announce`` (signals and batch callbacks, once).

Every outcome is made storable here (kathikon.storable): a database must
never refuse an ack. A result that cannot be stored does not fail the attempt
(``perform``'s work is done; retrying would only do it again): the job
completes with the marker of kathikon.storable as its result, and a warning
says so, once per outcome.

A job's time limit comes from one place, ``Worker.timeout_for(job)``, read
through :func:`job_timeout` (a number of seconds, or ``None``). Async jobs are
cancelled in the event loop; a synchronous ``perform`` cannot be interrupted,
so the runtime's executor pool (kathikon.runtime.pool) enforces its limit.
"""

from __future__ import annotations

import datetime as dt
import inspect
import logging
import math
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from kathikon import batch as _batches
from kathikon import conf, performing, signals
from kathikon.backoff import with_jitter
from kathikon.compat import TASK_WORKER
from kathikon.exceptions import (
    JobTimeout,
    KathikonError,
    TransactionLeftOpen,
    UnstorableOutcome,
    error_kind,
)
from kathikon.jobspec import worker_class
from kathikon.models import Job
from kathikon.states import TERMINAL_STATES, JobState
from kathikon.storable import (
    MAX_MESSAGE,
    MAX_TRACEBACK,
    UNSTORED,
    clamp_delay,
    clean_text,
    describe,
    result_or_marker,
    unstored_marker,
)
from kathikon.storage import Ack, Acked, hygiene, start_job, write_acks
from kathikon.tracing.hooks import current_traceparent, traced
from kathikon.workers import Discard, Retry, Snooze, Worker
from kathikon.workflows.announce import announce as announce_settled

logger = logging.getLogger("kathikon")

UNKNOWN_WORKER_RETRY = 5.0  # seconds between looks for a worker that knows a job's class

__all__ = ["Execution", "Executor", "JobTimeout", "Plan", "announce", "call_perform",
           "conclude", "execute_job", "fail_job", "is_async_worker", "job_timeout", "record",
           "result_refused", "run_job", "settle", "unknown_worker", "unstorable"]


@dataclass(slots=True)
class Execution:
    """One run of a job: what happened, and the ack that records it."""

    job: Job
    kind: str  # completed | failed | discarded | snoozed | deferred (unknown worker, for now)
    ack: Ack
    worker: type[Worker]
    exception: BaseException | None = None
    duration: float = 0.0
    queue_time: float = 0.0
    written: bool = False


@dataclass(frozen=True, slots=True)
class Plan:
    """What the runtime needs before ``perform`` starts: its time limit and where it runs.

    ``error`` is set when the worker cannot even be set up (its module raised at
    import, its ``timeout`` is not a number of seconds): the attempt fails with it.
    """

    timeout: float | None = None
    is_async: bool = False
    error: BaseException | None = None


class Executor:
    """Turns one claimed job into an :class:`Execution`; never raises, writes nothing.

    Stateless: one instance serves every thread. Whatever ``perform`` raises,
    ``BaseException`` included, is the attempt's outcome; a transaction it
    left open is rolled back and fails the attempt.

    ``unknown_worker_grace`` (seconds; the runtime passes ``UNKNOWN_WORKER_GRACE``): a
    job whose worker class cannot be imported here goes back to its queue, its attempt
    not counted, until it is that old, since a newer worker process may know the class
    (a rolling deploy). 0, the default of in-process runs and tests: dead at once.
    """

    def __init__(self, *, unknown_worker_grace: float = 0.0) -> None:
        self.unknown_worker_grace = unknown_worker_grace

    def plan(self, job: Job) -> Plan:
        """Resolve the worker class and its limit for ``job`` (never raises)."""
        try:
            _, cls = worker_class(job.worker)
        except KathikonError:
            return Plan()  # run() records the unknown worker
        except Exception as exc:  # the worker's module raised at import
            return Plan(error=exc)
        is_async = is_async_worker(cls)
        try:
            return Plan(job_timeout(cls, job), is_async)
        except Exception as exc:
            return Plan(None, is_async, exc)

    def run(self, job: Job, plan: Plan | None = None, *, owns_thread: bool = False) -> Execution:
        """Run ``job`` on this thread and classify what happened.

        ``owns_thread``: the caller is an executor thread that holds no transaction
        of its own; afterwards its broken or obsolete connections are closed too,
        as at the end of a request.
        """
        started = time.perf_counter()
        plan = plan or self.plan(job)
        if plan.error is not None:
            return fail_job(job, plan.error)
        depths = None if owns_thread else hygiene.atomic_depths()
        with traced(job) as end:  # the attempt's span, when tracing is on
            try:
                execution = run_job(job, timeout=plan.timeout,
                                    unknown_worker_grace=self.unknown_worker_grace)
            except BaseException as exc:  # SystemExit & co. from perform: the outcome
                execution = fail_job(job, exc, duration=_since(started))
            aliases = hygiene.roll_back_left_open(depths, TransactionLeftOpen(),
                                                  close_unusable=owns_thread)
            if aliases:
                error = TransactionLeftOpen(
                    f"perform left a transaction open (database {', '.join(aliases)}); its "
                    "writes were rolled back" + (f" (perform also raised "
                                                 f"{execution.exception!r})"
                                                 if execution.kind == "failed" else ""))
                execution = fail_job(job, error, duration=_since(started))
            end(execution)
        return execution


def job_timeout(cls: type[Worker], job: Job) -> float | None:
    """``cls.timeout_for(job)`` as seconds; ``ImproperlyConfigured`` for anything else.

    A ``datetime.timedelta`` is converted; ``None`` means no limit.
    """
    value = cls.timeout_for(job)
    if value is None:
        return None
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0):
        return float(value)
    raise ImproperlyConfigured(f"{cls.__module__}.{cls.__qualname__}.timeout must be a "
                               f"number of seconds > 0 or None, not {value!r}")


def execute_job(job: Job) -> Execution:
    """Run a claimed (or running) job and write its outcome; never raises for user errors."""
    if job.state == JobState.CLAIMED and not start_job(job):
        raise KathikonError(f"job {job.id.hex} was claimed by someone else since")
    return settle([Executor().run(job)])[0]


def run_job(job: Job, *, timeout: float | None = None, invoke: Any = None,
            unknown_worker_grace: float = 0.0) -> Execution:
    """Call the worker's ``perform`` and classify the outcome (writes nothing)."""
    started = time.perf_counter()
    queue_time = _queue_time(job)
    try:
        _, cls = worker_class(job.worker)
    except KathikonError as exc:
        return unknown_worker(job, exc, queue_time, grace=unknown_worker_grace)
    signals.send(signals.job_started, cls, job=job, queue_time=queue_time)
    worker = cls()
    # Batch.open() inside perform records its batch here: the parent's outcome then holds it
    with performing.performing(job) as running:
        try:
            if invoke is not None:
                outcome = invoke(worker, job)
            else:
                outcome = call_perform(worker, job, timeout)
            if isinstance(outcome, (Retry, Discard, Snooze)):
                raise outcome
            # completed in perform's own transaction: what it returns is not stored
            result = None if job.completed_in_transaction else _storable(job, outcome)
        except Snooze as snooze:
            ack = Ack(job, JobState.SCHEDULED, delay=_delay(snooze.seconds, 0.0),
                      restore_attempt=True)
            return Execution(job, "snoozed", ack, cls, snooze, _since(started), queue_time)
        except Discard as discard:
            ack = Ack(job, JobState.DEAD, error=_error(job, discard))
            return Execution(job, "discarded", ack, cls, discard, _since(started), queue_time)
        except BaseException as exc:  # user code failed (SystemExit included): that is
            # data, recorded with its real class, never a crashed worker
            return _failed(job, worker, exc, started, queue_time)
    ack = Ack(job, JobState.COMPLETED, result=result, hold_parent=bool(running.open_batches))
    return Execution(job, "completed", ack, cls, None, _since(started), queue_time)


def unknown_worker(job: Job, exc: KathikonError, queue_time: float, *,
                   grace: float) -> Execution:
    """The job's worker class cannot be imported here. Younger than ``grace``: back to its
    queue in a few seconds, attempt not counted (a newer worker may know the class);
    older: dead with ``kathikon.UnknownWorker`` (renamed or removed)."""
    now = dt.datetime.now(dt.timezone.utc)
    age = (now - job.inserted_at).total_seconds() if job.inserted_at else grace
    if age < grace:
        ack = Ack(job, JobState.AVAILABLE, delay=min(UNKNOWN_WORKER_RETRY, grace - age),
                  restore_attempt=True)
        return Execution(job, "deferred", ack, Worker, exc, 0.0, queue_time)
    # str(exc) already reads "unknown worker '…': why"
    error = _error(job, exc, kind="kathikon.UnknownWorker", message=str(exc))
    sender: type[Worker] = Worker
    if job.meta.get("task_backend") is not None:  # a Django Task whose path is gone: the
        sender = worker_class(TASK_WORKER)[1]     # backend still sends task_finished
    return Execution(job, "discarded", Ack(job, JobState.DEAD, error=error), sender, exc,
                     0.0, queue_time)


def fail_job(job: Job, exc: BaseException, *, duration: float = 0.0) -> Execution:
    """The failed attempt of a job that did not get to (or through) ``perform``: its timeout,
    a worker that cannot be set up, a dead thread; writes nothing."""
    try:
        _, cls = worker_class(job.worker)
    except Exception:
        cls = Worker
    return _failed(job, cls(), exc, time.perf_counter() - duration, _queue_time(job))


def conclude(job: Job, outcome: Any) -> Execution:
    """The execution of an attempt run outside ``perform`` (an external runner); writes nothing.

    ``outcome`` is what ``perform`` would have returned (a result, ``Snooze``,
    ``Discard``) or raised (an exception: a failed attempt, retried with the
    worker's backoff or ``Retry.in_seconds``, dead at ``max_attempts``).
    """
    if isinstance(outcome, Exception) and not isinstance(outcome, (Snooze, Discard)):
        started = job.started_at or job.inserted_at
        duration = (dt.datetime.now(dt.timezone.utc) - started).total_seconds()
        return fail_job(job, outcome, duration=max(0.0, duration))
    try:
        _, cls = worker_class(job.worker)
    except KathikonError:
        cls = Worker
    if isinstance(outcome, Snooze):
        ack = Ack(job, JobState.SCHEDULED, delay=_delay(outcome.seconds, 0.0),
                  restore_attempt=True)
        return Execution(job, "snoozed", ack, cls, outcome, 0.0, _queue_time(job))
    if isinstance(outcome, Discard):
        ack = Ack(job, JobState.DEAD, error=_error(job, outcome))
        return Execution(job, "discarded", ack, cls, outcome, 0.0, _queue_time(job))
    ack = Ack(job, JobState.COMPLETED, result=_storable(job, outcome))
    return Execution(job, "completed", ack, cls, None, 0.0, _queue_time(job))


_async_workers: dict[type[Worker], bool] = {}


def is_async_worker(cls: type[Worker]) -> bool:
    """Whether ``cls.perform`` is ``async def`` (looked up once per class, not per job)."""
    found = _async_workers.get(cls)
    if found is None:
        found = _async_workers[cls] = inspect.iscoroutinefunction(cls.perform)
    return found


def call_perform(worker: Worker, job: Job, timeout: float | None) -> Any:
    """Call ``perform``; coroutines run on the process's event loop with ``timeout``
    (``None``: the worker's own, looked up only here, for async workers).

    A synchronous ``perform`` cannot be interrupted: its timeout is the executor
    pool's watchdog (kathikon.runtime.pool), so it is not looked up per job here.
    """
    if is_async_worker(type(worker)):
        from kathikon.runtime.loop import run_coroutine

        limit = timeout if timeout is not None else job_timeout(type(worker), job)
        return run_coroutine(worker.perform(job), limit)
    return worker.perform(job)


def settle(executions: Sequence[Execution]) -> list[Execution]:
    """Write every outcome with one ``write_acks`` call, then send the signals."""
    announce(executions, record(executions))
    return list(executions)


def record(executions: Sequence[Execution]) -> Acked:
    """Write the outcomes (one transaction at most; nothing written when it raises)."""
    done = {execution.job.id for execution in executions
            if execution.job.completed_in_transaction}
    for execution in executions:
        if execution.job.id in done:  # completed in perform's own transaction: no ack to write
            _completed_in_transaction(execution)
    acked = write_acks([execution.ack for execution in executions
                        if execution.job.id not in done])
    for execution in executions:
        job = execution.job
        if job.id in done:
            acked.written.add(job.id)
            if job.batch_id is not None and job.state in TERMINAL_STATES:
                acked.finished_batches.add(job.batch_id)
            if job.settled:  # a workflow step: what its own transaction released (once)
                acked.settled.merge(job.settled)
                job.settled = None
        execution.written = job.id in acked.written
    return acked


def _completed_in_transaction(execution: Execution) -> None:
    """The job committed its own completion (whatever perform did afterwards): say so."""
    execution.kind, execution.exception = "completed", None
    execution.ack = Ack(execution.job, JobState.COMPLETED, result=execution.job.result)


def announce(executions: Sequence[Execution], acked: Acked) -> None:
    """After ``record``: the signals of what was written, and the batches it finished."""
    for execution in executions:
        if not execution.written:
            logger.warning("kathikon: ack of job %s fenced off (rescued or changed since its "
                           "claim); outcome %s dropped", execution.job.id.hex, execution.kind)
            continue
        if execution.job.id in acked.held:
            continue  # completed, with its signal, when its batch is closed
        _send_outcome(execution)
    if acked.finished_batches:  # one query; jobs outside batches pay nothing
        _batches.children_finished(acked.finished_batches)
    if acked.settled:  # workflow steps released or finished in the ack's transaction
        announce_settled(acked.settled)


def unstorable(execution: Execution, exc: BaseException, *, detail: bool = True) -> Execution:
    """The failed attempt that replaces an outcome the database refused for good.

    ``detail=False`` leaves out the database's message and traceback: the last
    resort, when even the detailed error could not be written.
    """
    what = f"{type(exc).__name__}: {describe(exc)}" if detail else type(exc).__name__
    error = UnstorableOutcome(f"the {execution.kind} outcome of this attempt could not be "
                              f"stored ({what})")
    failed = _failed(execution.job, execution.worker(), error, time.perf_counter(),
                     execution.queue_time)
    if detail:
        failed.ack.error = _error(execution.job, exc, kind=error_kind(UnstorableOutcome),
                                  message=str(error))
    failed.duration = execution.duration
    return failed


def result_refused(execution: Execution, exc: BaseException) -> Execution:
    """The completion that replaces one whose result the database refused for good: still
    completed (the work is done), its result replaced by the marker (reason ``refused``)."""
    job, ack = execution.job, execution.ack
    message = f"the database refused the result ({type(exc).__name__}: {describe(exc)})"
    marker = unstored_marker(ack.result, "refused", message)
    return Execution(job, "completed", Ack(job, JobState.COMPLETED, result=marker,
                                           hold_parent=ack.hold_parent),
                     execution.worker, None, execution.duration, execution.queue_time)


def _failed(job: Job, worker: Worker, exc: BaseException, started: float,
            queue_time: float) -> Execution:
    duration = _since(started)
    error = _error(job, exc)
    if job.attempts >= job.max_attempts:
        return Execution(job, "failed", Ack(job, JobState.DEAD, error=error), type(worker), exc,
                         duration, queue_time)
    asked = clamp_delay(exc.in_seconds) if isinstance(exc, Retry) else None
    ack = Ack(job, JobState.RETRYABLE, error=error,
              delay=asked if asked is not None else _backoff(worker, job))
    return Execution(job, "failed", ack, type(worker), exc, duration, queue_time)


def _backoff(worker: Worker, job: Job) -> float:
    """The worker's backoff with jitter, clamped; the default one if it fails or is NaN."""
    try:
        delay = clamp_delay(worker.backoff(job))
    except Exception:
        logger.exception("kathikon: %s.backoff() failed; using the default",
                         type(worker).__name__)
        delay = None
    else:
        if delay is None:
            logger.warning("kathikon: %s.backoff() returned a value that is not a number of "
                           "seconds; using the default", type(worker).__name__)
    if delay is None:
        delay = Worker.backoff(worker, job)
    return _delay(with_jitter(delay), 0.0)


def _delay(seconds: object, default: float) -> float:
    """``seconds`` clamped to ``0 .. MAX_DELAY``; ``default`` for NaN or a non-number."""
    clamped = clamp_delay(seconds)
    return clamped if clamped is not None else default


def _send_outcome(execution: Execution) -> None:
    job, cls = execution.job, execution.worker
    if execution.kind == "deferred":
        return  # not an outcome: the job waits for a worker that knows its class
    common = {"job": job, "duration": execution.duration, "queue_time": execution.queue_time}
    if execution.kind == "completed":
        signals.send(signals.job_completed, cls, result=job.result, **common)
    elif execution.kind == "snoozed":
        signals.send(signals.job_snoozed, cls, seconds=execution.ack.delay, **common)
    elif execution.kind == "discarded":
        signals.send(signals.job_discarded, cls, error=execution.ack.error, **common)
    else:
        retry_at = job.available_at if job.state == JobState.RETRYABLE else None
        signals.send(signals.job_failed, cls, error=execution.ack.error,
                     exception=execution.exception, retry_at=retry_at, **common)


def _error(job: Job, exc: BaseException, *, kind: str | None = None,
           message: str | None = None) -> dict[str, Any]:
    """The ``job.errors`` entry of a failed attempt: storable on every database, capped."""
    try:
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:  # a hostile __str__ or __cause__: keep what can be had
        trace = ""
    entry = {
        "attempt": job.attempts,
        "at": dt.datetime.now(dt.timezone.utc).isoformat(),
        # when this attempt started: job.started_at is only the latest (TaskResult.started_at)
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "node": job.attempted_by or "",  # who ran this attempt (TaskResult.worker_ids)
        "kind": clean_text(kind or error_kind(type(exc)), 255),
        "message": clean_text(message if message is not None else describe(exc), MAX_MESSAGE),
        "traceback": clean_text(trace, MAX_TRACEBACK),
    }
    span = current_traceparent()  # tracing on: the next attempt's span links to this one
    if span:
        entry["span"] = span
    return entry


def _storable(job: Job, result: Any) -> Any:
    """The result as stored; the marker of kathikon.storable, logged, when it cannot be."""
    if result is None or conf.result_storage() != "store":
        return None
    stored, refused = result_or_marker(result)
    if refused is not None:
        marker = stored[UNSTORED]
        logger.warning("kathikon: job %s (%s) completed, but %s; job.result holds the %r "
                       "marker instead (reason %s)", job.id.hex, job.worker,
                       marker["message"], UNSTORED, marker["reason"])
    return stored


def _queue_time(job: Job) -> float:
    if job.started_at is None or job.available_at is None:
        return 0.0
    return max(0.0, (job.started_at - job.available_at).total_seconds())


def _since(started: float) -> float:
    return time.perf_counter() - started
