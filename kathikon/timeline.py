"""Internal: a job's history, derived from its own row plus the stored exceptional events.

A successful run writes no event rows: inserted, scheduled, started, failed
and finished events come from the job's timestamps and ``errors`` (each error
records when its attempt started, so every attempt shows its start).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils.dateparse import parse_datetime

from kathikon.models import Job, JobEvent
from kathikon.states import JobState


def job_history(job: Job, events: list[JobEvent]) -> list[dict[str, Any]]:
    """Events oldest first, each ``{"event", "at", ...}``."""
    items: list[dict[str, Any]] = [{"event": "inserted", "at": job.inserted_at,
                                    "queue": job.queue}]
    if job.scheduled_at is not None:
        items.append({"event": "scheduled", "at": job.inserted_at, "for": job.scheduled_at})
    # Each failed attempt's error records when it started; the row holds the latest start.
    # Starts go before failures: at equal times the start of an attempt comes first.
    started: dict[Any, dict[str, Any]] = {}
    for error in job.errors:
        at = _time(error.get("started_at"))
        if at is not None:
            started[error.get("attempt")] = {"event": "started", "at": at,
                                             "attempt": error.get("attempt"),
                                             "node": error.get("node")}
    if job.started_at is not None:
        started[job.attempts] = {"event": "started", "at": job.started_at,
                                 "attempt": job.attempts, "node": job.attempted_by}
    items += started.values()
    for error in job.errors:
        items.append({"event": "failed", "at": _time(error.get("at")) or job.inserted_at,
                      "attempt": error.get("attempt"), "kind": error.get("kind"),
                      "message": error.get("message")})
    finished: dict[str, str] = {JobState.COMPLETED: "completed", JobState.DEAD: "dead"}
    if job.state in finished and job.completed_at is not None:
        items.append({"event": finished[job.state], "at": job.completed_at})
    stored_kinds = {event.kind for event in events}
    if (job.state == JobState.CANCELLED and job.cancelled_at is not None
            and "cancelled" not in stored_kinds):
        items.append({"event": "cancelled", "at": job.cancelled_at})
    for event in events:
        items.append({"event": event.kind, "at": event.at, "actor": event.actor, **event.data})
    epoch = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
    return sorted(items, key=lambda item: item["at"] or epoch)


def _time(value: Any) -> dt.datetime | None:
    return parse_datetime(value) if isinstance(value, str) else None
