"""Internal: batch rows, their children's counts, and the exactly-once completion.

A batch completes exactly once: the status moves ``closed → completed`` with a
conditional ``UPDATE`` (only while it is still closed and every child is
terminal) and the caller inserts the callback job in the same transaction. Of
two nodes whose last children finish at the same instant, one UPDATE matches
the row and the other (blocked on its lock, then re-checked) matches nothing.

Lock order, where a batch has a parent job: the parent's job row first, then
the batch row — ``close`` and the ack's "hold the parent" path both follow
it, so they serialise instead of deadlocking.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable
from typing import Any

from django.db.models import Count, Exists, OuterRef

from kathikon.exceptions import BatchNotFound
from kathikon.ids import parse_id
from kathikon.models import Batch, Job
from kathikon.states import EXECUTING_STATES, TERMINAL_STATES, JobState
from kathikon.storage import vendor
from kathikon.storage.schema import explain_missing_schema
from kathikon.storage.settle import settle, step_members
from kathikon.storage.uniques import key_after

#: Key set on a parent's ``meta`` while it waits, already performed, for its batch to close.
AWAITING = "kathikon_awaiting_batch"


def batches() -> Any:
    return Batch.objects.using(vendor.alias())


def _jobs() -> Any:
    return Job.objects.using(vendor.alias())


def batch_pk(batch_id: object) -> uuid.UUID:
    pk = parse_id(getattr(batch_id, "pk", batch_id))
    if pk is None:
        raise BatchNotFound(f"no batch with id {batch_id!r} (ids are hex strings)")
    return pk


def insert_batch(*, parent_job_id: uuid.UUID | None, worker: str, args: dict[str, Any],
                 options: dict[str, Any]) -> Batch:
    batch = Batch(parent_job_id=parent_job_id, on_complete_worker=worker,
                  on_complete_args=args, on_complete_options=options,
                  inserted_at=vendor.now())
    with explain_missing_schema():
        batch.save(force_insert=True, using=vendor.alias())
    return batch


def fetch_batch(batch_id: object, *, lock: bool = False) -> Batch:
    pk = batch_pk(batch_id)
    query = batches().select_for_update() if lock else batches()
    batch = query.filter(pk=pk).first()
    if batch is None:
        raise BatchNotFound(f"no batch with id {pk.hex}")
    return batch


def job_exists(job_id: uuid.UUID) -> bool:
    return _jobs().filter(pk=job_id).exists()


def lock_job(job_id: uuid.UUID) -> None:
    """Inside the caller's transaction: take the job row's lock (no-op on SQLite)."""
    list(_jobs().select_for_update().filter(pk=job_id).values_list("id", flat=True))


def close_batch(batch: Batch, now: dt.datetime) -> None:
    batches().filter(pk=batch.pk, status=Batch.Status.OPEN).update(
        status=Batch.Status.CLOSED, closed_at=now)
    batch.status, batch.closed_at = Batch.Status.CLOSED, now


def has_open_batch(parent_job_id: uuid.UUID) -> bool:
    return batches().filter(parent_job_id=parent_job_id, status=Batch.Status.OPEN).exists()


def count_children(batch_id: uuid.UUID) -> dict[str, int]:
    counts = {state: 0 for state in JobState.values}
    rows = (_jobs().filter(batch_id=batch_id).order_by().values("state")
            .annotate(n=Count("id")))
    for row in rows:
        counts[row["state"]] = row["n"]
    return counts


_UNFINISHED = [state for state in JobState.values if state not in TERMINAL_STATES]


def _without_pending_children(query: Any) -> Any:
    """Batches of ``query`` that have no unfinished child.

    The unfinished states are listed (not "NOT IN terminal") so that the
    ``(batch, state)`` index answers with an index-only probe, however many
    children have already finished.
    """
    pending = _jobs().filter(batch_id=OuterRef("pk"), state__in=_UNFINISHED)
    return query.filter(~Exists(pending))


def finished_batch_ids(batch_ids: Iterable[uuid.UUID] | None = None, *,
                       limit: int = 100) -> list[uuid.UUID]:
    """Closed batches (among ``batch_ids``, or all) whose children are all terminal: one query."""
    query = batches().filter(status=Batch.Status.CLOSED)
    if batch_ids is not None:
        query = query.filter(pk__in=list(batch_ids))
    return list(_without_pending_children(query).order_by().values_list("id", flat=True)[:limit])


def mark_completed(batch_id: uuid.UUID, now: dt.datetime) -> Batch | None:
    """Closed → completed if every child is terminal; ``None`` when someone else did it first."""
    updated = _without_pending_children(batches().filter(
        pk=batch_id, status=Batch.Status.CLOSED)).update(status=Batch.Status.COMPLETED,
                                                          completed_at=now)
    return batches().get(pk=batch_id) if updated else None


def set_callback(batch: Batch, job_id: uuid.UUID) -> None:
    batches().filter(pk=batch.pk).update(callback_job_id=job_id)
    batch.callback_job_id = job_id


def hold_parent(job: Job, result: Any) -> dict[str, Any] | None:
    """Keep a parent that has performed ``running`` while a batch of it is open.

    Runs inside the ack's transaction. Fenced like an ack (same lease, still
    executing); stores the result now and marks the row so ``close`` knows the
    parent has finished performing. Returns the fields written, or ``None`` when
    no batch of the parent is open any more (ack it normally) or the ack is fenced.
    """
    lock_job(job.id)
    if not has_open_batch(job.id):
        return None
    changes = {"result": result, "meta": {**job.meta, AWAITING: True}}
    updated = _jobs().filter(id=job.id, lease=job.lease, state__in=EXECUTING_STATES).update(
        **changes)
    return changes if updated else None


def complete_held_parent(parent_job_id: uuid.UUID, now: dt.datetime) -> Job | None:
    """Complete a parent that performed and waited, once none of its batches is open."""
    if has_open_batch(parent_job_id):
        return None
    job = _jobs().filter(pk=parent_job_id, state=JobState.RUNNING).first()
    if job is None or not job.meta.get(AWAITING):
        return None
    meta = {key: value for key, value in job.meta.items() if key != AWAITING}
    updated = _jobs().filter(pk=job.pk, lease=job.lease, state=JobState.RUNNING).update(
        state=JobState.COMPLETED, completed_at=now, meta=meta,
        unique_key=key_after(JobState.COMPLETED))
    if not updated:
        return None
    job.state, job.completed_at, job.meta = JobState.COMPLETED, now, meta
    if job.workflow_id is not None:  # a workflow step that opened a batch: it settles now
        job.settled = settle(step_members([(job.id, job.workflow_id, job.state)]), now=now)
    return job
