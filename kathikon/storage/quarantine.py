"""Internal: crash suspects — the jobs that run alone in their process (the crash budget).

A job rescued from a worker process that died is a *suspect*: it, or one of the
jobs beside it, took the process down, and nobody can tell which. Ordinary
claims skip suspects (``storage.claims``); a worker process with nothing
running claims one suspect here and runs it alone, so a crash during that run
identifies the culprit (``storage.rescue`` charges it). The claim clears the
flag and records the lease it ran under in ``quarantine_lease``: a suspect that
then completes or fails normally is an ordinary job again.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import QuerySet

from kathikon.models import Job, Queue
from kathikon.states import CLAIMABLE_STATES, JobState
from kathikon.storage import vendor
from kathikon.storage.uniques import key_after
from kathikon.unique import holds


def _due(queues: Sequence[str]) -> QuerySet[Job]:
    using = vendor.alias()
    paused = Queue.objects.using(using).filter(paused=True).values("name")
    return (Job.objects.using(using)
            .filter(suspect=True, state__in=CLAIMABLE_STATES, queue__in=list(queues),
                    available_at__lte=vendor.now())
            .exclude(queue__in=paused))


def suspects_waiting(queues: Sequence[str]) -> bool:
    """Whether a crash suspect of an unpaused queue among ``queues`` is due now."""
    if not queues:
        return False
    return _due(queues).exists()


def claim_suspect(queues: Sequence[str], node: str) -> Job | None:
    """Claim the best due suspect of ``queues`` for ``node`` (into ``running``), or None.

    The caller runs it alone: nothing else runs in its process until it ends.
    """
    if not queues:
        return None
    using = vendor.alias()
    now = vendor.now()
    with vendor.atomic():
        # The id breaks ties: a crash rescues all its jobs with one available_at.
        candidates = _due(queues).order_by("-priority", "available_at", "id")
        if vendor.vendor() != "sqlite":
            candidates = candidates.select_for_update(skip_locked=True)
        job = candidates.first()
        if job is None:
            return None
        # Fenced like every claim: only while it is still the due suspect we read. Literal
        # values, not F("lease") + 1: MariaDB assigns left to right.
        lease = job.lease + 1
        claimed = Job.objects.using(using).filter(
            id=job.id, lease=job.lease, suspect=True, state__in=CLAIMABLE_STATES,
        ).update(state=JobState.RUNNING, attempts=job.attempts + 1, started_at=now,
                 attempted_by=node, lease=lease, suspect=False, quarantine_lease=lease,
                 unique_key=key_after(JobState.RUNNING))
    if not claimed:
        return None
    job.state, job.started_at, job.attempted_by = JobState.RUNNING, now, node
    job.attempts += 1
    job.lease += 1
    job.suspect, job.quarantine_lease = False, job.lease
    if not holds(job.unique_states, JobState.RUNNING):
        job.unique_key = None
    return job
