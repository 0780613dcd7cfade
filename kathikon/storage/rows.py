"""Internal: turn raw result rows into Job instances the way the ORM would."""

from __future__ import annotations

import json
import uuid
from typing import Any

from kathikon.models import Job

JOB_FIELDS = [f for f in Job._meta.concrete_fields]
JOB_ATTNAMES = [f.attname for f in JOB_FIELDS]
JOB_COLUMNS = ", ".join(f'"{f.column}"' for f in JOB_FIELDS)
_JSON_POSITIONS = [i for i, f in enumerate(JOB_FIELDS) if f.get_internal_type() == "JSONField"]
_UUID_POSITIONS = [
    i for i, f in enumerate(JOB_FIELDS)
    if (getattr(f, "target_field", None) or f).get_internal_type() == "UUIDField"
]


def jobs_from_rows(rows: list[tuple[Any, ...]], using: str) -> list[Job]:
    """Job instances from rows selected or returned with ``JOB_COLUMNS`` (PostgreSQL)."""
    jobs = []
    for row in rows:
        values = list(row)
        for i in _JSON_POSITIONS:
            if isinstance(values[i], str):
                values[i] = json.loads(values[i])
        for i in _UUID_POSITIONS:
            if isinstance(values[i], str):
                values[i] = uuid.UUID(values[i])
        jobs.append(Job.from_db(using, JOB_ATTNAMES, values))
    return jobs
