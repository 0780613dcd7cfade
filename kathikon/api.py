"""The public API: enqueue, inspect and steer jobs and queues.

Every function goes through ``kathikon.storage``; errors are the typed
exceptions of ``kathikon.exceptions``.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import socket
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

from kathikon import conf, routing, signals, storage
from kathikon.exceptions import InvalidJob, InvalidQueue, KathikonError
from kathikon.ids import id_stream
from kathikon.jobspec import (
    InsertResult,
    RowPlan,
    build_row,
    checked_delay,
    plan_row,
    unpack_spec,
    worker_class,
)
from kathikon.known_queues import known
from kathikon.limits import LIMIT_KEYS
from kathikon.limits import merged as merged_limits
from kathikon.models import Job, Queue
from kathikon.states import JobState
from kathikon.workflows.announce import announce

F = TypeVar("F", bound=Callable[..., Any])


def _on_job(func: F) -> F:
    """Run ``func(job_id, …)`` on the database that holds the job (several: docs/scaling.md)."""
    @functools.wraps(func)
    def on_its_database(job_id: object, *args: Any, **kwargs: Any) -> Any:
        with routing.for_job(job_id):
            return func(job_id, *args, **kwargs)
    return cast(F, on_its_database)


def _on_queue(func: F) -> F:
    """Run ``func(name, …)`` on the queue's database."""
    @functools.wraps(func)
    def on_its_database(name: str, *args: Any, **kwargs: Any) -> Any:
        storage.queues.validate_name(name)
        with routing.for_queue(name):
            return func(name, *args, **kwargs)
    return cast(F, on_its_database)


def insert(worker: Any, args: dict[str, Any] | None = None, *, queue: str | None = None,
           priority: int | None = None, max_attempts: int | None = None,
           schedule_in: float | dt.timedelta | None = None,
           schedule_at: dt.datetime | None = None, **extra: Any) -> Job:
    """Enqueue one job; inside ``transaction.atomic()`` it commits or rolls back with you.

    Raises ``InvalidJob`` (naming the bad key) and inserts nothing on bad input. A unique
    job (``unique=`` or the worker's ``unique``) whose key another job holds is not inserted:
    that job is returned, with ``job.conflict`` True.
    """
    options = {"queue": queue, "priority": priority, "max_attempts": max_attempts,
               "schedule_in": schedule_in, "schedule_at": schedule_at, **extra}
    row = build_row(worker, args, options)
    with routing.for_queue(row.queue):  # its queue's database (KATHIKON["DATABASE"] mostly)
        job = storage.insert_job(row)
        known.notice(row.queue)  # a queue nothing serves: warned once (no query for settings')
    if job.conflict:
        return job
    _, cls = worker_class(row.worker)
    signals.send(signals.job_inserted, cls, job=job)
    if conf.testing_mode() == "inline":  # kathikon.testing: run the job now, in this process
        from kathikon.testing import run_inline

        job = run_inline(job)
    return job


def insert_many(specs: Iterable[Sequence[Any]], *, chunk_size: int = 5000) -> InsertResult:
    """Enqueue many jobs with one statement per chunk; bad specs are reported, good ones inserted.

    A spec is ``(worker, args)`` or ``(worker, args, options)``.
    """
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise InvalidJob("chunk_size must be an int >= 1", key="chunk_size")
    rows, errors, positions = [], [], []
    now = storage.vendor.now()
    plans: dict[str | type, RowPlan] = {}  # option-less specs: one plan per worker
    fresh_ids = id_stream()
    for index, spec in enumerate(specs):
        try:
            worker, args, options = unpack_spec(spec)
            reusable = not options and isinstance(worker, (str, type))
            plan = plans.get(worker) if reusable else None
            if plan is None:
                plan = plan_row(worker, options, now)
                if reusable:
                    plans[worker] = plan
            rows.append(plan.row(args, next(fresh_ids)))
            positions.append(index)
        except InvalidJob as exc:
            errors.append((index, str(exc)))
    queues = {row.queue for row in rows}
    with routing.for_queues(queues, "insert_many"):
        ids = storage.insert_jobs(rows, chunk_size=chunk_size)
        for queue in queues:
            known.notice(queue)
    conflicts = [index for index, row, pk in zip(positions, rows, ids, strict=True)
                 if pk != row.id]
    if conflicts:
        rows = [row for row, pk in zip(rows, ids, strict=True) if pk == row.id]
    listened = {path: cls for path, cls in map(worker_class, {row.worker for row in rows})
                if signals.job_inserted.has_listeners(cls)}
    for row in rows:
        if row.worker in listened:
            signals.send(signals.job_inserted, listened[row.worker], job=row.to_job())
    if rows and conf.testing_mode() == "inline":
        from kathikon.testing import run_inline

        for row in rows:
            run_inline(row.to_job())
    return InsertResult(inserted=len(rows), ids=[pk.hex for pk in ids], errors=errors,
                        conflicts=conflicts)


@_on_job
def fetch(job_id: object) -> Job:
    """The job with that id (hex string or UUID); ``JobNotFound`` otherwise."""
    return storage.fetch_job(job_id)


def all() -> list[Job]:
    """Every job, oldest first (tests and debugging)."""
    return storage.all_jobs()


@_on_job
def cancel(job_id: object) -> Job:
    """Cancel a pending job; ``JobExecuting`` while it runs, ``InvalidState`` once terminal."""
    job = storage.cancel_job(job_id)
    signals.send(signals.job_cancelled, _sender(job), job=job)
    if job.batch_id is not None:  # it may have been the last unfinished child
        from kathikon.batch import children_finished

        children_finished([job.batch_id])
    announce(job.settled)  # a workflow step: what its cancel released or cancelled
    return job


@_on_job
def retry(job_id: object) -> Job:
    """Put the same job back to available now (from scheduled, retryable, dead, cancelled,
    completed). A workflow step continues its workflow: what its failure cancelled waits
    for it again (kathikon.workflows)."""
    job = storage.retry_job(job_id)
    announce(job.settled)
    return job


@_on_job
def rerun(job_id: object) -> Job:
    """A new job copied from a completed, dead or cancelled one."""
    job = storage.rerun_job(job_id)
    signals.send(signals.job_inserted, _sender(job), job=job)
    return job


def dead_jobs(queue: str | None = None) -> list[Job]:
    """Dead jobs, most recent first, optionally of one queue."""
    return storage.dead_jobs(queue)


@_on_job
def status(job_id: object) -> dict[str, Any]:
    """A job's state and counters as a plain dict."""
    job = storage.fetch_job(job_id)
    last_error = job.errors[-1] if job.errors else None
    return {
        "id": job.id.hex, "state": job.state, "queue": job.queue, "worker": job.worker,
        "attempts": job.attempts, "max_attempts": job.max_attempts, "priority": job.priority,
        "inserted_at": job.inserted_at, "scheduled_at": job.scheduled_at,
        "available_at": job.available_at, "started_at": job.started_at,
        "completed_at": job.completed_at, "cancelled_at": job.cancelled_at,
        "errors": len(job.errors), "last_error": last_error and last_error.get("message"),
        "attempted_by": job.attempted_by or None,
    }


@_on_job
def history(job_id: object) -> list[dict[str, Any]]:
    """A job's events, oldest first: derived from its row, plus stored exceptional events."""
    from kathikon.timeline import job_history

    job = storage.fetch_job(job_id)
    return job_history(job, storage.events_for(job.id))


@_on_job
def claim(job_id: object, *, node: str | None = None) -> Job:
    """Claim one job for an external runner (state ``claimed``); see ``claim_available``."""
    with storage.schema.explain_missing_schema():
        return storage.claim_job(job_id, node or default_node())


def claim_available(queue: str = "default", *, node: str | None = None) -> Job | None:
    """Claim the best due job of ``queue`` (state ``claimed``), or ``None``."""
    storage.queues.validate_name(queue)
    with routing.for_queue(queue), storage.schema.explain_missing_schema():
        jobs = storage.claim_jobs(queue, 1, node or default_node(), into=JobState.CLAIMED)
    return jobs[0] if jobs else None


@_on_queue
def start_queue(name: str) -> Queue:
    """Make sure the queue exists and is not paused; running workers pick it up."""
    storage.ensure_queue(name)
    if storage.set_paused(name, False):
        signals.send(signals.queue_resumed, Queue, queue=name)
    return storage.queue_rows()[name]


@_on_queue
def pause_queue(name: str) -> None:
    """Stop claiming from ``name`` on every node; running jobs finish."""
    if storage.set_paused(name, True):
        signals.send(signals.queue_paused, Queue, queue=name)


@_on_queue
def resume_queue(name: str) -> None:
    """Claim from ``name`` again (at once on PostgreSQL)."""
    if storage.set_paused(name, False):
        signals.send(signals.queue_resumed, Queue, queue=name)


@_on_queue
def set_queue_limits(name: str, *, reset: bool = False, **limits: Any) -> dict[str, Any]:
    """Change ``name``'s global_limit, partition or rate_limit at run time, on every node.

    Each given key overrides the settings (``None`` = unlimited); keys not given keep
    their current override; ``reset=True`` drops every override first. Persisted on the
    queue's row; workers pick it up within ``POLL_INTERVAL``. Returns the effective
    limits; ``InvalidQueue`` (nothing changed) on a bad name, key or value.
    """
    unknown = set(limits) - set(LIMIT_KEYS)
    if unknown:
        raise InvalidQueue(f"unknown limit {sorted(unknown)[0]!r}: use "
                           f"{', '.join(LIMIT_KEYS)}")
    row = storage.queue_rows().get(name)
    override = {} if reset or row is None else dict(row.limits or {})
    override.update(limits)
    effective = merged_limits(conf.queue_config(name), override)  # validates
    storage.queues.set_limits(name, override or None)
    return effective.as_options()


def schedule(worker: Any, args: dict[str, Any] | None = None, *, at: dt.datetime | None = None,
             in_seconds: float | None = None, cron: str | None = None, **options: Any) -> str:
    """Run once ``at`` a time or ``in_seconds``, or on a ``cron`` expression.

    Returns the job id (hex) for one-time jobs, the cron schedule id for ``cron``.
    """
    given = [name for name, value in (("at", at), ("in_seconds", in_seconds), ("cron", cron))
             if value is not None]
    if len(given) != 1:
        raise InvalidJob("give exactly one of at=, in_seconds= or cron=", key="schedule")
    if cron is not None:
        from kathikon import cron as cron_api

        return cron_api.insert(worker, args, cron=cron, **options).id.hex
    if at is not None:
        if not isinstance(at, dt.datetime):
            raise InvalidJob(f"at must be an aware datetime, not {at!r}", key="at")
        return insert(worker, args, schedule_at=at, **options).id.hex
    checked_delay(in_seconds, storage.vendor.now(), "in_seconds")  # names in_seconds if bad
    return insert(worker, args, schedule_in=in_seconds, **options).id.hex


def default_node() -> str:
    """This process's node name: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _sender(job: Job) -> type:
    try:
        return worker_class(job.worker)[1]
    except KathikonError:
        from kathikon.workers import Worker

        return Worker


__all__ = [
    "InsertResult", "all", "cancel", "claim", "claim_available", "dead_jobs", "fetch",
    "history", "insert", "insert_many", "pause_queue", "rerun", "resume_queue", "retry",
    "schedule", "set_queue_limits", "start_queue", "status",
]
