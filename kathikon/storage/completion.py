"""Internal: a job completing itself inside its own transaction (``Job.complete_in_transaction``).

One fenced UPDATE in the caller's transaction: the job becomes ``completed``
only if it is still executing under the lease of this attempt. It commits or
rolls back with the job's own writes; ``on_commit`` tells the runtime, whose
later ack of the attempt is then skipped.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from django.db import transaction

from kathikon.models import Job
from kathikon.states import EXECUTING_STATES, JobState
from kathikon.storage import vendor
from kathikon.storage.settle import settle, step_members
from kathikon.storage.uniques import key_after


def complete_in_transaction(job: Job, result: Any, now: dt.datetime,
                            on_commit: Callable[[], None]) -> bool:
    """Complete ``job`` in the current transaction; False if this attempt was fenced off."""
    written = Job.objects.using(vendor.alias()).filter(
        id=job.id, lease=job.lease, state__in=EXECUTING_STATES,
    ).update(state=JobState.COMPLETED, completed_at=now, result=result,
             unique_key=key_after(JobState.COMPLETED))
    if written:
        if job.workflow_id is not None:  # what waits on this step is released with it
            # kept on the job: the runtime sends its signals with the attempt's (executor.record)
            job.settled = settle(step_members([(job.id, job.workflow_id, JobState.COMPLETED)]),
                                 now=now)
        transaction.on_commit(on_commit, using=vendor.alias())
    return bool(written)
