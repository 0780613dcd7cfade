"""The operations facade behind the admin, ``manage.py kathikon_ops`` and your own tools.

    from kathikon import dashboard

    page = dashboard.list_jobs(queue="emails", state="dead", limit=50)
    for job in page.jobs:
        print(job.id.hex, job.worker, job.errors[-1]["message"])
    more = dashboard.list_jobs(queue="emails", state="dead", cursor=page.next_cursor)

    detail = dashboard.fetch_job(page.jobs[0].id.hex)   # job + history + errors
    dashboard.retry_jobs([job.id for job in page.jobs])  # ActionResult(changed, failed)
    dashboard.pause_queue("emails")

Reads are always allowed. Operations that change jobs or queues (retry,
cancel, rerun, delete, pause, resume, prune) are *destructive*: they run only
when allowed, by the ``allow_destructive=`` argument or, when that is
``None`` (the default), by ``settings.KATHIKON["ALLOW_DESTRUCTIVE_ACTIONS"]``
(default ``True``). When refused they raise ``kathikon.ActionNotAllowed`` and
change nothing. Changes go through the public API, so signals fire as usual.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import kathikon
from kathikon import conf, known_queues, report, routing
from kathikon.exceptions import ActionNotAllowed, InvalidState, KathikonError
from kathikon.ids import parse_id
from kathikon.models import Job
from kathikon.states import JobState
from kathikon.storage import events, partitions, reports, vendor
from kathikon.storage import jobs as job_storage
from kathikon.storage import queues as queue_storage
from kathikon.storage.bulk import retry_chunk
from kathikon.workflows.announce import announce

__all__ = [
    "ActionResult", "JobDetail", "JobPage", "all_queues", "cancel_job", "cancel_jobs",
    "delete_jobs", "destructive_allowed", "fetch_job", "job_as_dict", "list_jobs", "pause_all",
    "pause_queue", "prune", "queue_summary", "rerun_job", "rerun_jobs", "resume_all",
    "resume_queue", "retry_job", "retry_jobs",
]

MAX_LIMIT = 1000
RETRY_CHUNK = 1000  # jobs a retry_jobs transaction takes (storage.bulk)


@dataclass(frozen=True)
class JobPage:
    """One page of jobs, newest first; pass ``next_cursor`` back for the next (older) page."""

    jobs: list[Job]
    next_cursor: str | None


@dataclass(frozen=True)
class JobDetail:
    """A job with its history (oldest first) and its errors (each with a traceback)."""

    job: Job
    history: list[dict[str, Any]]
    errors: list[dict[str, Any]]


@dataclass(frozen=True)
class ActionResult:
    """What a bulk action did: ids (hex) it changed or created, and ``(id, reason)`` refusals."""

    changed: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)


def destructive_allowed(allow_destructive: bool | None = None) -> bool:
    """The argument when given, else ``KATHIKON["ALLOW_DESTRUCTIVE_ACTIONS"]``."""
    if allow_destructive is not None:
        return bool(allow_destructive)
    return conf.allow_destructive_actions()


def _require(allow_destructive: bool | None, what: str) -> None:
    if not destructive_allowed(allow_destructive):
        raise ActionNotAllowed(f"{what} is a destructive action and destructive actions are "
                               "disabled (KATHIKON['ALLOW_DESTRUCTIVE_ACTIONS'] is False)")


# -- reads -------------------------------------------------------------------------------------

def queue_summary() -> list[report.QueueSummary]:
    """Every queue with counts per state and throughput; see ``kathikon.report``."""
    return report.queue_summary()


def list_jobs(*, queue: str | None = None, state: str | None = None, worker: str | None = None,
              limit: int = 50, cursor: str | None = None,
              database: str | None = None) -> JobPage:
    """Jobs newest first, filtered; keyset-paginated on the (time-ordered) id.

    ``cursor`` is the ``next_cursor`` of the previous page: the next page holds
    jobs strictly older than it, so inserts never shift or repeat rows (no OFFSET).
    Raises ``InvalidState`` for an unknown state, ``InvalidQueue`` for a bad queue
    name and ``ValueError`` for a bad cursor or limit.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be an int from 1 to {MAX_LIMIT}, not {limit!r}")
    if database is not None and database not in conf.databases():
        raise ValueError(f"no queue lives in the database {database!r}; databases: "
                         f"{', '.join(conf.databases())}")
    database = database or (conf.queue_database(queue) if queue else None)
    with vendor.using(database) if database else nullcontext():
        where = vendor.read_alias()  # a report: READ_DATABASE for DATABASE's jobs
    query = job_storage.jobs().using(where).order_by("-id")
    if state is not None:
        if state not in JobState.values:
            raise InvalidState(f"unknown state {state!r}; states are "
                               f"{', '.join(JobState.values)}", state=state)
        query = query.filter(state=state)
    if queue is not None:  # matching(): an index path to rare values too
        query = query.filter(reports.matching("queue", queue_storage.validate_name(queue)))
    if worker is not None:
        query = query.filter(reports.matching("worker", worker))
    if cursor is not None:
        after = parse_id(cursor)
        if after is None:
            raise ValueError(f"bad cursor {cursor!r}: pass a page's next_cursor")
        query = query.filter(id__lt=after)
    jobs = list(query[:limit + 1])
    more = len(jobs) > limit
    jobs = jobs[:limit]
    return JobPage(jobs=jobs, next_cursor=jobs[-1].id.hex if more else None)


def job_as_dict(job: Job) -> dict[str, Any]:
    """A job as plain JSON-friendly data (ids hex, times ISO 8601)."""
    data: dict[str, Any] = {"id": job.id.hex}
    for name in ("queue", "worker", "state", "priority", "attempts", "max_attempts", "args",
                 "result", "attempted_by", "meta", "inserted_at", "scheduled_at",
                 "available_at", "started_at", "completed_at", "cancelled_at"):
        value = getattr(job, name)
        data[name] = value.isoformat() if isinstance(value, dt.datetime) else value
    for name in ("batch_id", "parent_job_id", "cron_id"):
        value = getattr(job, name)
        data[name] = value.hex if value is not None else None
    data["errors"] = list(job.errors)
    return data


def fetch_job(job_id: object) -> JobDetail:
    """The job, its history and errors; ``JobNotFound`` if there is no such job."""
    job = kathikon.fetch(job_id)
    from kathikon.timeline import job_history

    history = job_history(job, events.events_for(job.id))
    return JobDetail(job=job, history=history, errors=list(job.errors))


# -- queues ------------------------------------------------------------------------------------

def pause_queue(name: str, *, allow_destructive: bool | None = None) -> None:
    """Stop claiming from ``name`` on every node (running jobs finish)."""
    _require(allow_destructive, "pausing a queue")
    kathikon.pause_queue(name)


def resume_queue(name: str, *, allow_destructive: bool | None = None) -> None:
    _require(allow_destructive, "resuming a queue")
    kathikon.resume_queue(name)


def set_queue_limits(name: str, *, reset: bool = False, allow_destructive: bool | None = None,
                     **limits: Any) -> dict[str, Any]:
    """Change a queue's flow limits on every node (see ``kathikon.set_queue_limits``)."""
    _require(allow_destructive, "changing a queue's limits")
    return kathikon.set_queue_limits(name, reset=reset, **limits)


def pause_all(*, allow_destructive: bool | None = None) -> list[str]:
    """Pause every queue of ``all_queues()``; returns their names.

    Queues outside the settings get a paused row: claims refuse a paused row on
    every node, whichever way a worker came to serve the queue.
    """
    _require(allow_destructive, "pausing all queues")
    return _set_all(True)


def resume_all(*, allow_destructive: bool | None = None) -> list[str]:
    """Resume every queue of ``all_queues()`` (the same set as ``pause_all``)."""
    _require(allow_destructive, "resuming all queues")
    return _set_all(False)


#: "All queues" reads at most this many distinct queue names from the jobs.
ALL_QUEUES_CAP = 10_000


def all_queues() -> dict[str, list[str]]:
    """Every queue "pause all" covers, by name, with why each is included.

    The reasons are ``settings`` (``KATHIKON["QUEUES"]``), ``TASKS``, ``row`` (a
    ``Queue`` row), ``worker`` (a live node serves it, e.g. with ``--queues``)
    and ``jobs`` (it holds jobs): a queue a worker runs but that is in none of
    the settings is paused too. A few index-only queries, whatever the job count.
    """
    with vendor.primary_reads():  # an action's list: fresh, never a replica's
        sources = (*known_queues.queue_sources(),
                   ("jobs", reports.distinct_values("queue", limit=ALL_QUEUES_CAP)))
    found: dict[str, list[str]] = {}
    for reason, names in sources:
        for name in names:
            found.setdefault(name, []).append(reason)
    return dict(sorted(found.items()))


def _set_all(paused: bool) -> list[str]:
    names = list(all_queues())
    if paused:
        for name in names:
            kathikon.pause_queue(name)
        return names
    # A queue without a row is not paused; resuming it would create one, and workers
    # started without --queues serve every queue that has a row.
    rows = queue_storage.queue_rows()
    for name in names:
        if name in rows:
            kathikon.resume_queue(name)
    return names


# -- jobs --------------------------------------------------------------------------------------

def retry_job(job_id: object, *, allow_destructive: bool | None = None) -> Job:
    """The same job back to available now; see ``kathikon.retry``."""
    _require(allow_destructive, "retrying a job")
    return kathikon.retry(job_id)


def cancel_job(job_id: object, *, allow_destructive: bool | None = None) -> Job:
    """Cancel a pending job; see ``kathikon.cancel``."""
    _require(allow_destructive, "cancelling a job")
    return kathikon.cancel(job_id)


def rerun_job(job_id: object, *, allow_destructive: bool | None = None) -> Job:
    """A new job copied from a finished one; returns the new job."""
    _require(allow_destructive, "rerunning a job")
    return kathikon.rerun(job_id)


def retry_jobs(ids: Iterable[object], *, allow_destructive: bool | None = None,
               actor: str = "") -> ActionResult:
    """Retry each job, a chunk of 1,000 a transaction (storage.bulk); ``actor`` goes into
    each job's history."""
    _require(allow_destructive, "retrying jobs")
    wanted, failed = _parse_ids(ids)
    changed: list[str] = []
    for database, pks in routing.by_database(wanted):
        for start in range(0, len(pks), RETRY_CHUNK):
            with vendor.using(database):
                retried, refused, settled = retry_chunk(pks[start:start + RETRY_CHUNK],
                                                        actor=actor)
            changed += [pk.hex for pk in retried]
            failed += [(pk.hex, why) for pk, why in refused]
            for job in settled:  # workflow steps: what their retry made wait again
                announce(job.settled)
    return ActionResult(changed=changed, failed=failed)


def _parse_ids(ids: Iterable[object]) -> tuple[list[Any], list[tuple[str, str]]]:
    """The job ids (hex, UUID or a job) of ``ids``, and what is not one, refused."""
    wanted, failed = [], []
    for job_id in ids:
        pk = parse_id(getattr(job_id, "pk", job_id))
        if pk is None:
            failed.append((str(job_id), "not a job id"))
        else:
            wanted.append(pk)
    return wanted, failed


def cancel_jobs(ids: Iterable[object], *, allow_destructive: bool | None = None) -> ActionResult:
    _require(allow_destructive, "cancelling jobs")
    return _each(ids, kathikon.cancel)


def rerun_jobs(ids: Iterable[object], *, allow_destructive: bool | None = None) -> ActionResult:
    """Rerun each job; ``changed`` lists the ids of the *new* jobs."""
    _require(allow_destructive, "rerunning jobs")
    return _each(ids, kathikon.rerun)


def delete_jobs(ids: Iterable[object], *, allow_destructive: bool | None = None) -> ActionResult:
    """Delete jobs and their history; claimed or running jobs are refused."""
    _require(allow_destructive, "deleting jobs")
    wanted, failed = _parse_ids(ids)
    deleted, refused = [], []
    for database, pks in routing.by_database(wanted):
        with vendor.using(database):
            done, kept = reports.delete_jobs(pks)
        deleted += done
        refused += kept
    found = set(deleted) | set(refused)
    failed += [(pk.hex, "claimed or running, or an unfinished workflow step (cancel it); it "
                "cannot be deleted now") for pk in refused]
    failed += [(pk.hex, "no such job") for pk in wanted if pk not in found]
    return ActionResult(changed=[pk.hex for pk in deleted], failed=failed)


def prune(*, older_than: float | dt.timedelta | None = None, chunk: int = 1000,
          allow_destructive: bool | None = None) -> int:
    """Delete finished jobs older than ``older_than`` (default: RETENTION_PERIOD); returns count."""
    _require(allow_destructive, "pruning jobs")
    if older_than is None:
        older_than = conf.retention_period()
    before = report.window_start(older_than, vendor.now(), what="older_than")
    total = 0
    for database in conf.databases():  # queues on several databases: each one's jobs
        with vendor.using(database):
            total += partitions.drop_expired(before)
            while True:
                deleted = job_storage.prune_jobs(before, limit=chunk)
                total += deleted
                if deleted < chunk:
                    break
    return total


def _each(ids: Iterable[object], operation: Any) -> ActionResult:
    changed, failed = [], []
    for job_id in ids:
        pk = parse_id(getattr(job_id, "pk", job_id))
        shown = pk.hex if pk is not None else str(job_id)
        try:
            changed.append(operation(job_id).id.hex)
        except KathikonError as exc:
            failed.append((shown, str(exc)))
    return ActionResult(changed=changed, failed=failed)
