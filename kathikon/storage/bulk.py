"""Internal: retrying many jobs at once — the admin's bulk retry, a chunk a transaction.

The common case, a job outside any workflow that holds no unique key, is retried by one
UPDATE for the whole chunk (its rows locked first, in id order, and their events written
by one INSERT); a workflow step or a unique job goes through :func:`retry_job` in the
same transaction, a savepoint each, so its workflow settles and its key is kept as a
single retry does. What cannot be retried (executing, already available, waiting or
held, gone) is reported with the reason a single retry gives.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from django.db.models import Case, F, Value, When
from django.db.models.functions import Greatest

from kathikon.exceptions import KathikonError
from kathikon.models import Job, JobEvent
from kathikon.states import JobState
from kathikon.storage import notify, vendor
from kathikon.storage.jobs import retry_job

#: States a retry takes a job from (the rest are refused by retry_job, saying why).
RETRIABLE = (JobState.SCHEDULED, JobState.RETRYABLE, JobState.DEAD, JobState.CANCELLED,
             JobState.COMPLETED)


def retry_chunk(ids: Sequence[uuid.UUID], *, actor: str = "") -> tuple[
        list[uuid.UUID], list[tuple[uuid.UUID, str]], list[Job]]:
    """Retry ``ids`` in one transaction: ``(retried, refused with why, jobs whose workflow
    settled)``; the caller announces the settled workflows after the commit."""
    using = vendor.alias()
    retried: list[uuid.UUID] = []
    refused: list[tuple[uuid.UUID, str]] = []
    settled: list[Job] = []
    with vendor.atomic():
        now = vendor.now()
        rows = list(Job.objects.using(using).select_for_update().filter(id__in=list(ids))
                    .order_by("id").values_list("id", "state", "queue", "workflow_id",
                                                "unique_key"))
        found = {row[0] for row in rows}
        refused += [(pk, f"no job with id {pk.hex}") for pk in ids if pk not in found]
        simple = [row for row in rows if row[1] in RETRIABLE and row[3] is None
                  and row[4] is None]
        if simple:
            Job.objects.using(using).filter(id__in=[row[0] for row in simple]).update(
                state=JobState.AVAILABLE, available_at=now, completed_at=None,
                cancelled_at=None, max_attempts=Greatest(F("max_attempts"), F("attempts") + 1),
                crashes=0, suspect=Case(When(crashes__gt=0, then=Value(True)),
                                        default=F("suspect")))
            JobEvent.objects.using(using).bulk_create([
                JobEvent(job_id=row[0], kind="retried", actor=actor, at=now,
                         data={"previous_state": row[1]}) for row in simple])
            retried += [row[0] for row in simple]
            notify.notify(notify.AVAILABLE, {row[2] for row in simple})
        simple_ids = {row[0] for row in simple}
        for pk in (row[0] for row in rows if row[0] not in simple_ids):
            try:
                with vendor.atomic():  # a savepoint: one refusal leaves the chunk whole
                    job = retry_job(pk, actor=actor)
            except KathikonError as exc:
                refused.append((pk, str(exc)))
            else:
                retried.append(pk)
                if job.settled:
                    settled.append(job)
    return retried, refused, settled
