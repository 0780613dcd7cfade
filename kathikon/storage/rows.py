"""Internal: turn raw result rows into Job instances the way the ORM would."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from kathikon.models import Job
from kathikon.storage import vendor

_new = Job.__new__

JOB_FIELDS = [f for f in Job._meta.concrete_fields]
JOB_ATTNAMES = [f.attname for f in JOB_FIELDS]
JOB_COLUMNS = ", ".join(f'"{f.column}"' for f in JOB_FIELDS)
JOB_COLUMNS_MYSQL = ", ".join(f"`{f.column}`" for f in JOB_FIELDS)
_JSON_POSITIONS = [i for i, f in enumerate(JOB_FIELDS) if f.get_internal_type() == "JSONField"]
_UUID_POSITIONS = [
    i for i, f in enumerate(JOB_FIELDS)
    if (getattr(f, "target_field", None) or f).get_internal_type() == "UUIDField"
]
_DATETIME_POSITIONS = [i for i, f in enumerate(JOB_FIELDS)
                       if f.get_internal_type() == "DateTimeField"]


def _load_json(text: str) -> Any:
    # The empty containers every fresh job has; a new object each time (they are mutable).
    if text == "{}":
        return {}
    if text == "[]":
        return []
    return json.loads(text)


def jobs_from_rows(rows: list[tuple[Any, ...]], using: str, *, typed: bool = False) -> list[Job]:
    """Job instances from rows selected or returned with ``JOB_COLUMNS``.

    MariaDB/MySQL hand back datetimes naive (Django stores them in UTC) and UUIDs and
    JSON as text; they are converted here as the ORM's converters would. ``typed``: the
    driver already gave UUIDs and aware datetimes (psycopg), only JSON is decoded.

    Without ``pre_init``/``post_init`` receivers for Job, the instances are built
    the way ``Model.__init__`` leaves them (attribute values and ``_state``)
    without its per-field loop: the claim path builds one per claimed job.
    """
    fast = not (pre_init.has_listeners(Job) or post_init.has_listeners(Job))
    jobs = []
    for row in rows:
        values = list(row)
        for i in _JSON_POSITIONS:
            if isinstance(values[i], str):
                values[i] = _load_json(values[i])
        if not typed:
            for i in _UUID_POSITIONS:
                if isinstance(values[i], str):
                    values[i] = uuid.UUID(values[i])
            for i in _DATETIME_POSITIONS:
                value = values[i]
                if value is not None and value.tzinfo is None:
                    values[i] = value.replace(tzinfo=dt.timezone.utc)
        if fast:
            job = _new(Job)
            state = ModelState()
            state.adding, state.db = False, using
            job.__dict__["_state"] = state
            job.__dict__.update(zip(JOB_ATTNAMES, values, strict=True))
        else:
            job = Job.from_db(using, JOB_ATTNAMES, values)
        jobs.append(job)
    return jobs


def fetch_jobs(cursor: Any, sql: str, params: Any) -> list[Job]:
    """Run ``sql`` (PostgreSQL, selecting or returning ``JOB_COLUMNS``) and build its jobs.

    psycopg already gives UUIDs and aware datetimes, so only JSON is decoded; in a UTC
    session its own C loader reads the timestamps (``vendor.load_timestamps_natively``).
    The claim paths build one job per row, so this is what they share.
    """
    vendor.load_timestamps_natively(cursor)
    cursor.execute(sql, params)
    return jobs_from_rows(cursor.fetchall(), cursor.db.alias, typed=True)
