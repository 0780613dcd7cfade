"""Internal: the reads and writes behind ``kathikon.testing`` (drain, assert_enqueued)."""

from __future__ import annotations

import datetime as dt

from kathikon.models import Job
from kathikon.states import CLAIMABLE_STATES, PENDING_STATES, JobState
from kathikon.storage import notify, vendor
from kathikon.storage.queues import paused_queues
from kathikon.storage.uniques import key_after


def pending_jobs(*, worker: str | None = None, queue: str | None = None) -> list[Job]:
    """Jobs waiting to run (scheduled, available, retryable), oldest first."""
    query = Job.objects.using(vendor.alias()).filter(state__in=PENDING_STATES)
    if worker is not None:
        query = query.filter(worker=worker)
    if queue is not None:
        query = query.filter(queue=queue)
    return list(query.order_by("id"))


def due_queues(now: dt.datetime | None = None) -> list[str]:
    """Names of the queues that have a job claimable now."""
    now = now or vendor.now()
    return sorted(set(
        Job.objects.using(vendor.alias())
        .filter(state__in=CLAIMABLE_STATES, available_at__lte=now)
        .order_by().values_list("queue", flat=True).distinct()))


def make_due(queue: str | None = None, now: dt.datetime | None = None) -> int:
    """Scheduled and retryable jobs (of ``queue``) become available now; returns how many.

    Jobs of paused queues are left alone: they would not be run anyway.
    """
    now = now or vendor.now()
    query = Job.objects.using(vendor.alias()).filter(
        state__in=(JobState.SCHEDULED, JobState.RETRYABLE)).exclude(queue__in=paused_queues())
    if queue is not None:
        query = query.filter(queue=queue)
    with vendor.atomic():
        queues = set(query.order_by().values_list("queue", flat=True).distinct())
        changed = query.update(state=JobState.AVAILABLE, available_at=now,
                               unique_key=key_after(JobState.AVAILABLE))
        notify.notify(notify.AVAILABLE, queues)
    return changed
