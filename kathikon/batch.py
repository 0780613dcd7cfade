"""Batches: fan out child jobs, fan in with one callback once they have all finished.

    from kathikon import Batch

    class Resize(kathikon.Worker):
        def perform(self, job):
            batch = Batch.start(job.id, [(Thumbnail, {"size": s}) for s in (64, 128, 256)],
                                on_complete=(Publish, {"album": job.args["album"]}))

    # or step by step: the parent stays ``running`` until the batch is closed
    batch = Batch.open(parent_job_id, on_complete=(Reduce, {}))
    Batch.append(batch.id, [(Map, {"part": 1}), (Map, {"part": 2}, {"queue": "maps"})])
    Batch.close(batch.id)
    Batch.fetch(batch.id).counts        # {"available": 1, "completed": 1, ...}

A child spec is ``(worker, args)`` or ``(worker, args, options)`` as for
``kathikon.insert_many``; children carry ``batch_id`` and ``parent_job_id``.
When the batch is closed and every child is terminal (completed, dead or
cancelled), the ``on_complete`` job ``(worker, args[, options])`` is enqueued
exactly once, with ``args`` merged with ``{"batch_id", "completed", "dead",
"cancelled"}`` (the counts of children in each final state) and
``parent_job_id`` set to the batch's parent. ``on_complete=None`` completes the
batch without a callback.

A parent job that calls ``Batch.open`` inside its own ``perform`` and returns
while the batch is still open stays ``running`` (its result stored) until
``close``, which completes it; the lifeline does not rescue it meanwhile.

Errors: ``BatchNotFound``, ``BatchClosed`` (``append`` after ``close``),
``InvalidJob`` (a bad child spec or ``on_complete``: nothing is inserted),
``JobNotFound`` (unknown parent). Signal: ``batch_completed(sender=models.Batch,
batch, callback_job, completed, dead, cancelled)``.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kathikon import performing, signals
from kathikon.exceptions import BatchClosed, InvalidJob, JobNotFound
from kathikon.ids import parse_id
from kathikon.jobspec import InsertResult, JobRow, build_row, unpack_spec, worker_class
from kathikon.models import Batch as BatchRow
from kathikon.models import Job
from kathikon.routing import require_home
from kathikon.states import TERMINAL_STATES, JobState
from kathikon.storage import batches as store
from kathikon.storage import insert_jobs, vendor
from kathikon.workflows.announce import announce as announce_settled

logger = logging.getLogger("kathikon")

CALLBACK_OPTIONS = frozenset({"queue", "priority", "max_attempts", "meta"})

@dataclass(frozen=True)
class Batch:
    """A snapshot of a batch: its status and how many children are in each state."""

    id: str
    status: str
    parent_job_id: str | None
    on_complete: str
    callback_job_id: str | None
    counts: dict[str, int] = field(default_factory=dict)
    inserted_at: dt.datetime | None = None
    closed_at: dt.datetime | None = None
    completed_at: dt.datetime | None = None

    @property
    def batch_id(self) -> str:
        """The seed's name for ``id``."""
        return self.id

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def finished(self) -> int:
        """Children in a terminal state (completed, dead or cancelled)."""
        return sum(self.counts.get(state, 0) for state in TERMINAL_STATES)

    # -- the API -----------------------------------------------------------------------------

    @classmethod
    def start(cls, parent_job_id: object, child_specs: Iterable[Sequence[Any]], *,
              on_complete: Sequence[Any] | None = None) -> Batch:
        """Open a batch, add the children and close it, in one transaction."""
        parent = _parent_id(parent_job_id)
        callback = _callback(on_complete)
        specs = list(child_specs)
        with vendor.atomic():
            row = store.insert_batch(parent_job_id=parent, **callback)
            rows = _insert_children(row, specs)
            completed = _close(row)
        _after_insert(rows)
        _after_close(completed)
        return fetch(row.id)

    @classmethod
    def open(cls, parent_job_id: object, *, on_complete: Sequence[Any] | None = None) -> Batch:
        """Open an empty batch; add children with ``append``, then ``close`` it."""
        parent = _parent_id(parent_job_id)
        row = store.insert_batch(parent_job_id=parent, **_callback(on_complete))
        running_here = performing.current_for(parent) if parent is not None else None
        if running_here is not None:  # the parent's outcome will say: hold me while it is open
            running_here.open_batches.add(row.id)
        return _snapshot(row, {state: 0 for state in JobState.values})

    @classmethod
    def append(cls, batch_id: object, specs: Iterable[Sequence[Any]]) -> InsertResult:
        """Add children to an open batch (all or none); ``BatchClosed`` once it is closed."""
        specs = list(specs)
        with vendor.atomic():
            row = store.fetch_batch(batch_id, lock=True)  # close() waits for us, or we for it
            if row.status != BatchRow.Status.OPEN:
                raise BatchClosed(f"batch {row.id.hex} is {row.status}; it takes no more jobs")
            rows = _insert_children(row, specs)
        _after_insert(rows)
        return InsertResult(inserted=len(rows), ids=[r.id.hex for r in rows])

    @classmethod
    def close(cls, batch_id: object) -> Batch:
        """No more children; the callback runs once they have all finished (at once if so)."""
        with vendor.atomic():
            row = store.fetch_batch(batch_id)
            if row.parent_job_id is not None:
                store.lock_job(row.parent_job_id)  # lock order: parent job, then batch
            row = store.fetch_batch(row.pk, lock=True)
            completed = _close(row)
        _after_close(completed)
        return fetch(row.pk)

    @classmethod
    def fetch(cls, batch_id: object) -> Batch:
        """The batch with counts of its children by state; ``BatchNotFound`` otherwise."""
        return fetch(batch_id)


def fetch(batch_id: object) -> Batch:
    row = store.fetch_batch(batch_id)
    return _snapshot(row, store.count_children(row.id))


# -- completion: called by the executor, api.cancel, the lifeline and the cron scheduler ----


def children_finished(batch_ids: Iterable[uuid.UUID]) -> None:
    """Some children of these batches reached a terminal state: complete the batches that
    are closed and done. One query when none is; never raises (the scheduler's sweep retries).
    """
    try:
        complete_finished_batches(set(batch_ids))
    except Exception:
        logger.exception("kathikon: checking batches for completion failed; the cron "
                         "scheduler's sweep will complete them")


def complete_finished_batches(batch_ids: Iterable[uuid.UUID] | None = None) -> list[uuid.UUID]:
    """Complete (and enqueue the callbacks of) closed batches whose children are all terminal.

    ``batch_ids=None`` checks every closed batch. Returns the ids completed by this call.
    """
    done = []
    for batch_id in store.finished_batch_ids(batch_ids):
        with vendor.atomic():
            completed = _complete(batch_id)
        if completed is not None:
            _after_close(completed)
            done.append(batch_id)
    return done


# -- internals -------------------------------------------------------------------------------


_Completed = tuple[BatchRow, "Job | None", dict[str, int], "Job | None"]


def _parent_id(parent_job_id: object) -> uuid.UUID | None:
    if parent_job_id is None:
        return None
    pk = parse_id(getattr(parent_job_id, "pk", parent_job_id))
    if pk is None:
        raise JobNotFound(f"no job with id {parent_job_id!r} (ids are hex strings)")
    if performing.current_for(pk) is None and not store.job_exists(pk):
        raise JobNotFound(f"no job with id {pk.hex}")
    return pk


def _callback(on_complete: Sequence[Any] | None) -> dict[str, Any]:
    if on_complete is None:
        return {"worker": "", "args": {}, "options": {}}
    if not isinstance(on_complete, (tuple, list)) or len(on_complete) not in (2, 3):
        raise InvalidJob("on_complete is (worker, args) or (worker, args, options)",
                         key="on_complete")
    worker, args = on_complete[0], on_complete[1]
    options = dict(on_complete[2]) if len(on_complete) == 3 else {}
    unknown = set(options) - CALLBACK_OPTIONS
    if unknown:
        raise InvalidJob(f"on_complete option {sorted(unknown)[0]!r} is not supported "
                         f"(use {', '.join(sorted(CALLBACK_OPTIONS))})", key="on_complete")
    row = build_row(worker, args, options)  # validates now, not when the batch completes
    require_home([row.queue], "a batch's callback")
    return {"worker": row.worker, "args": row.args, "options": options}


def _insert_children(batch: BatchRow, specs: list[Sequence[Any]]) -> list[JobRow]:
    now = vendor.now()
    rows = []
    for index, spec in enumerate(specs):
        try:
            worker, args, options = unpack_spec(spec)
            if {"batch_id", "parent_job_id"} & set(options):
                raise InvalidJob("batch children get batch_id and parent_job_id from the batch",
                                 key="batch_id")
            rows.append(build_row(worker, args, {**options, "batch_id": batch.id,
                                                 "parent_job_id": batch.parent_job_id}, now))
            require_home([rows[-1].queue], "a batch")
        except InvalidJob as exc:
            raise InvalidJob(f"child spec {index}: {exc}", key=exc.key) from None
    insert_jobs(rows)
    return rows


def _close(row: BatchRow) -> _Completed | None:
    """Inside a transaction holding the parent's and the batch's locks."""
    now = vendor.now()
    if row.status == BatchRow.Status.OPEN:
        store.close_batch(row, now)
        running_here = performing.current_for(row.parent_job_id) if row.parent_job_id else None
        if running_here is not None:  # the parent is performing here: no need to wait for it
            running_here.open_batches.discard(row.id)
    parent = None
    if row.parent_job_id is not None:
        parent = store.complete_held_parent(row.parent_job_id, now)
    completed = _complete(row.id) if row.status == BatchRow.Status.CLOSED else None
    if completed is None:
        return (row, None, {}, parent) if parent is not None else None
    return completed[0], completed[1], completed[2], parent


def _complete(batch_id: uuid.UUID) -> _Completed | None:
    """Closed → completed and the callback inserted, in the caller's transaction."""
    now = vendor.now()
    row = store.mark_completed(batch_id, now)
    if row is None:
        return None  # not finished yet, or another node completed it a moment ago
    counts = store.count_children(row.id)
    callback = None
    if row.on_complete_worker:
        args = {**row.on_complete_args, "batch_id": row.id.hex,
                "completed": counts[JobState.COMPLETED], "dead": counts[JobState.DEAD],
                "cancelled": counts[JobState.CANCELLED]}
        try:
            job_row = build_row(row.on_complete_worker, args,
                                {**row.on_complete_options, "parent_job_id": row.parent_job_id},
                                now)
        except InvalidJob as exc:
            logger.error("kathikon: batch %s completed but its callback cannot be enqueued: %s",
                         row.id.hex, exc)
        else:
            from kathikon.storage import insert_job

            callback = insert_job(job_row)
            store.set_callback(row, callback.id)
    return row, callback, counts, None


def _after_insert(rows: list[JobRow]) -> None:
    for job_row in rows:
        _, cls = worker_class(job_row.worker)
        if signals.job_inserted.has_listeners(cls):
            signals.send(signals.job_inserted, cls, job=job_row.to_job())


def _after_close(completed: _Completed | None) -> None:
    if completed is None:
        return
    row, callback, counts, parent = completed
    if parent is not None:
        announce_settled(parent.settled)  # a workflow step: what its completion released
        _, cls = _worker_or_base(parent.worker)
        duration = ((parent.completed_at - parent.started_at).total_seconds()
                    if parent.started_at and parent.completed_at else 0.0)
        signals.send(signals.job_completed, cls, job=parent, result=parent.result,
                     duration=duration, queue_time=0.0)
    if row.status != BatchRow.Status.COMPLETED:
        return
    if callback is not None:
        signals.send(signals.job_inserted, _worker_or_base(callback.worker)[1], job=callback)
    signals.send(signals.batch_completed, BatchRow, batch=row, callback_job=callback,
                 completed=counts.get(JobState.COMPLETED, 0), dead=counts.get(JobState.DEAD, 0),
                 cancelled=counts.get(JobState.CANCELLED, 0))


def _worker_or_base(path: str) -> tuple[str, type]:
    from kathikon.exceptions import KathikonError
    from kathikon.workers import Worker

    try:
        return worker_class(path)
    except KathikonError:
        return path, Worker


def _snapshot(row: BatchRow, counts: dict[str, int]) -> Batch:
    return Batch(
        id=row.id.hex, status=row.status,
        parent_job_id=row.parent_job_id.hex if row.parent_job_id else None,
        on_complete=row.on_complete_worker,
        callback_job_id=row.callback_job_id.hex if row.callback_job_id else None,
        counts=counts, inserted_at=row.inserted_at, closed_at=row.closed_at,
        completed_at=row.completed_at)


__all__ = ["Batch", "children_finished", "complete_finished_batches"]
