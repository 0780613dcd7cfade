"""Internal: the worker runtime's own reads — orphaned claims and what is still due."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Count, Exists, OuterRef

from kathikon.models import Batch, Job, Queue
from kathikon.states import CLAIMABLE_STATES, EXECUTING_STATES, JobState
from kathikon.storage import vendor
from kathikon.storage.partitions import live


def executing_jobs(node: str, queue: str) -> list[Job]:
    """Jobs of ``queue`` claimed or running under ``node`` (to find claims whose reply was lost).

    Parents of an open batch are left out: they stay ``running`` after ``perform``
    returned, until the batch is closed (see kathikon.batch), and are nobody's orphans.
    """
    open_batch = Batch.objects.using(vendor.alias()).filter(
        parent_job_id=OuterRef("id"), status=Batch.Status.OPEN)
    return list(live(Job.objects.using(vendor.alias()).filter(
        queue=queue, attempted_by=node, state__in=EXECUTING_STATES))
        .exclude(Exists(open_batch)).order_by())


def count_due_jobs(queues: Iterable[str]) -> int:
    """Jobs of the unpaused queues among ``queues`` that could be claimed or promoted now."""
    using = vendor.alias()
    wanted = sorted(set(queues))
    names = set(wanted) - set(Queue.objects.using(using).filter(name__in=wanted, paused=True)
                              .values_list("name", flat=True))
    if not names:
        return 0
    states = [*CLAIMABLE_STATES, JobState.SCHEDULED]
    return live(Job.objects.using(using).filter(
        queue__in=sorted(names), state__in=states, available_at__lte=vendor.now())).count()


def due_jobs_elsewhere(queues: Iterable[str]) -> dict[str, int]:
    """Queue → due jobs, for the queues *not* in ``queues`` that hold any (one GROUP BY).

    ``--burst`` reports them when it exits: nobody in this process would ever run them.
    """
    states = [*CLAIMABLE_STATES, JobState.SCHEDULED]
    rows = (Job.objects.using(vendor.alias()).order_by()
            .filter(state__in=states, available_at__lte=vendor.now())
            .exclude(queue__in=sorted(set(queues)))
            .values("queue").annotate(count=Count("id")))
    return {row["queue"]: row["count"] for row in sorted(rows, key=lambda r: r["queue"])}
