"""Internal: the exceptional events of a job's history (cancel, retry, rescue, rerun, …)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable
from typing import Any

from kathikon.models import JobEvent
from kathikon.storage import vendor


def record_event(job_id: uuid.UUID, kind: str, *, actor: str = "", at: dt.datetime | None = None,
                 **data: Any) -> None:
    JobEvent.objects.using(vendor.alias()).create(
        job_id=job_id, kind=kind, actor=actor, at=at or vendor.now(), data=data)


def record_events(job_ids: Iterable[uuid.UUID], kind: str, *, actor: str = "",
                  **data: Any) -> None:
    at = vendor.now()
    JobEvent.objects.using(vendor.alias()).bulk_create(
        [JobEvent(job_id=job_id, kind=kind, actor=actor, at=at, data=data) for job_id in job_ids])


def events_for(job_id: uuid.UUID, *, database: str | None = None) -> list[JobEvent]:
    """The job's history, oldest first; ``database``: another alias than Kathikon's (the
    admin's page reads ``READ_DATABASE``)."""
    return list(JobEvent.objects.using(database or vendor.alias()).filter(job_id=job_id)
                .order_by("at", "id"))
