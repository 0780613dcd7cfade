"""Internal: reading jobs and operators' state changes (cancel, retry, rerun, promote, prune)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from django.db.models import Q

from kathikon.exceptions import InvalidState, JobExecuting, JobNotFound
from kathikon.ids import new_id, parse_id
from kathikon.models import Job, JobEvent, Workflow, WorkflowDep, WorkflowStep
from kathikon.states import EXECUTING_STATES, PENDING_STATES, TERMINAL_STATES, JobState
from kathikon.storage import notify, vendor
from kathikon.storage.events import record_event
from kathikon.storage.partitions import expired_ids, live, partitioned
from kathikon.storage.settle import FAILED_STATES, Member, settle, step_members
from kathikon.storage.uniques import key_after
from kathikon.unique import holds


def job_pk(job_id: object) -> uuid.UUID:
    pk = parse_id(getattr(job_id, "pk", job_id))
    if pk is None:
        raise JobNotFound(f"no job with id {job_id!r} (ids are hex strings)")
    return pk


def jobs() -> Any:
    return Job.objects.using(vendor.alias())


def database_of(job_id: object, databases: list[str]) -> str | None:
    """Which of ``databases`` holds the job (job ids are unique across them), or None.
    This thread's alias is asked first."""
    pk = parse_id(getattr(job_id, "pk", job_id))
    if pk is None:
        return None
    current = vendor.alias()
    for database in sorted(databases, key=lambda name: name != current):
        if Job.objects.using(database).filter(pk=pk).exists():
            return database
    return None


def ids_in(database: str, ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """Which of ``ids`` are jobs of ``database``."""
    found: set[uuid.UUID] = set()
    for start in range(0, len(ids), 1000):
        found.update(Job.objects.using(database).filter(pk__in=ids[start:start + 1000])
                     .values_list("pk", flat=True))
    return found


def fetch_job(job_id: object, *, lock: bool = False) -> Job:
    pk = job_pk(job_id)
    query = jobs().select_for_update() if lock else jobs()
    job = query.filter(pk=pk).first()
    if job is None:
        raise JobNotFound(f"no job with id {pk.hex}")
    return job


def all_jobs() -> list[Job]:
    return list(jobs().order_by("id"))


def update_job(job: Job, **changes: Any) -> Job:
    for name, value in changes.items():
        setattr(job, name, value)
    job.save(using=vendor.alias(), update_fields=list(changes))
    return job


def delete_job(job_id: object) -> None:
    pk = job_pk(job_id)
    with vendor.atomic():
        if not jobs().filter(pk=pk).delete()[0]:
            raise JobNotFound(f"no job with id {pk.hex}")
        WorkflowStep.objects.using(vendor.alias()).filter(job_id=pk).delete()


def cancel_job(job_id: object, *, actor: str = "") -> Job:
    """Pending → cancelled. Executing jobs raise ``JobExecuting``; terminal ``InvalidState``."""
    with vendor.atomic():
        job = fetch_job(job_id, lock=True)
        if job.state in EXECUTING_STATES:
            raise JobExecuting(f"job {job.id.hex} is {job.state}; it cannot be cancelled now")
        if job.state not in PENDING_STATES:
            raise InvalidState(f"job {job.id.hex} is already {job.state}", state=job.state)
        now = vendor.now()
        update_job(job, state=JobState.CANCELLED, cancelled_at=now, completed_at=now,
                   unique_key=_key_in(job, JobState.CANCELLED))
        record_event(job.id, "cancelled", actor=actor, at=now)
        if job.workflow_id is not None:
            job.settled = settle(step_members([(job.id, job.workflow_id, job.state)]), now=now)
    return job


def retry_job(job_id: object, *, actor: str = "") -> Job:
    """Put a job back to available now (scheduled, retryable, dead, cancelled or completed)."""
    with vendor.atomic():
        job = fetch_job(job_id, lock=True)
        if job.state in EXECUTING_STATES:
            raise JobExecuting(f"job {job.id.hex} is {job.state}; it is being run")
        if job.state == JobState.AVAILABLE:
            raise InvalidState(f"job {job.id.hex} is already available", state=job.state)
        if job.state == JobState.WAITING:
            raise InvalidState(f"job {job.id.hex} is a workflow step waiting for its "
                               "dependencies; it runs once they have settled", state=job.state)
        if job.state == JobState.HELD:  # a decision with its own permission and history
            raise InvalidState(f"job {job.id.hex} is a held workflow step: release it "
                               "(kathikon.workflows.release) or cancel it", state=job.state)
        now = vendor.now()
        previous = job.state
        # A job that crashed its worker gets a fresh crash budget but still runs alone.
        update_job(job, state=JobState.AVAILABLE, available_at=now, completed_at=None,
                   unique_key=_key_in(job, JobState.AVAILABLE),
                   cancelled_at=None, max_attempts=max(job.max_attempts, job.attempts + 1),
                   crashes=0, suspect=job.suspect or job.crashes > 0)
        record_event(job.id, "retried", actor=actor, at=now, previous_state=previous)
        notify.notify(notify.AVAILABLE, [job.queue])
        if job.workflow_id is not None and previous in TERMINAL_STATES:
            # what waited on the step waits again; what its failure cancelled is restored
            job.settled = settle([Member(job.id, job.workflow_id, previous in FAILED_STATES,
                                         undo=True)], now=now)
    return job


def rerun_job(job_id: object, *, actor: str = "") -> Job:
    """A new available job copied from a completed, dead or cancelled one."""
    with vendor.atomic():
        original = fetch_job(job_id)
        if original.state not in TERMINAL_STATES:
            raise InvalidState(f"job {original.id.hex} is {original.state}; only completed, "
                               "dead or cancelled jobs can be rerun", state=original.state)
        now = vendor.now()
        copy = Job(id=new_id(), queue=original.queue, worker=original.worker,
                   args=original.args, priority=original.priority,
                   max_attempts=original.max_attempts, state=JobState.AVAILABLE,
                   available_at=now, inserted_at=now, batch_id=original.batch_id,
                   parent_job_id=original.parent_job_id, suspect=original.crashes > 0,
                   meta={**original.meta, "rerun_of": original.id.hex})
        copy.save(force_insert=True, using=vendor.alias())
        record_event(original.id, "rerun", actor=actor, at=now, new_job=copy.id.hex)
        notify.notify(notify.AVAILABLE, [copy.queue])
    return copy


def _key_in(job: Job, state: str) -> str | None:
    """The unique key ``job`` keeps in ``state`` (it is locked: no race)."""
    return job.unique_key if holds(job.unique_states, state) else None


def dead_jobs(queue: str | None = None) -> list[Job]:
    query = jobs().filter(state=JobState.DEAD)
    if queue is not None:
        query = query.filter(queue=queue)
    return list(query.order_by("-completed_at", "-id"))


def promote_scheduled(now: dt.datetime | None = None, *, limit: int = 1000) -> int:
    """Scheduled jobs that are due become available, ``limit`` at a time; returns how many."""
    now = now or vendor.now()
    with vendor.atomic():
        ids = list(live(jobs().filter(state=JobState.SCHEDULED, available_at__lte=now))
                   .order_by("available_at").values_list("id", flat=True)[:limit])
        if not ids:
            return 0
        query = live(jobs().filter(id__in=ids, state=JobState.SCHEDULED))
        queues = set(query.values_list("queue", flat=True).distinct())
        promoted = query.update(state=JobState.AVAILABLE,
                                unique_key=key_after(JobState.AVAILABLE))
        notify.notify(notify.AVAILABLE, queues)
    return promoted


def prune_jobs(before: dt.datetime, *, limit: int = 1000, whole_days: bool = False) -> int:
    """Delete up to ``limit`` terminal jobs finished before ``before`` (and their events).

    ``whole_days`` (the pruner's): where the job table is partitioned, leave the day
    partitions' jobs alone, which ``partitions.maintain`` drops a whole day at a time.
    """
    with vendor.atomic():
        if whole_days and partitioned():
            ids = expired_ids(before, limit)
        else:
            ids = list(jobs().filter(state__in=TERMINAL_STATES, completed_at__lt=before)
                       .order_by("completed_at").values_list("id", flat=True)[:limit])
        if not ids:
            return 0
        JobEvent.objects.using(vendor.alias()).filter(job_id__in=ids).delete()
        WorkflowDep.objects.using(vendor.alias()).filter(job_id__in=ids).delete()
        WorkflowStep.objects.using(vendor.alias()).filter(job_id__in=ids).delete()
        return jobs().filter(id__in=ids).filter(
            Q(state__in=TERMINAL_STATES)).delete()[0]


def clear_jobs() -> None:
    """Delete every job, event and workflow (tests)."""
    JobEvent.objects.using(vendor.alias()).all().delete()
    WorkflowDep.objects.using(vendor.alias()).all().delete()
    WorkflowStep.objects.using(vendor.alias()).all().delete()
    Workflow.objects.using(vendor.alias()).all().delete()
    jobs().all().delete()


def count_by_state(queue: str | None = None) -> dict[str, int]:
    from django.db.models import Count

    query = jobs().order_by()
    if queue is not None:
        query = query.filter(queue=queue)
    counts = {state: 0 for state in JobState.values}
    for row in query.values("state").annotate(n=Count("id")):
        counts[row["state"]] = row["n"]
    return counts
