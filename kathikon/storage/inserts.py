"""Internal: inserting jobs — one statement per job or per chunk, NOTIFY in the same transaction.

On PostgreSQL with psycopg 3, ``insert_jobs`` streams each chunk with ``COPY …
FROM STDIN``: psycopg formats the rows in C and the server inserts them in
batches, about 2.5x faster than one ``INSERT … SELECT unnest(…)`` per chunk
(whose array parameters psycopg dumps in Python; still used with psycopg2).
The wake-up is one NOTIFY per queue in the same transaction, sent on commit.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

from django.db import connections

from kathikon.jobspec import JobRow
from kathikon.models import Job
from kathikon.states import JobState
from kathikon.storage import notify, prepared, uniques, vendor
from kathikon.storage.schema import explain_missing_schema

_INSERT_COLUMNS = ("id, queue, worker, args, state, priority, max_attempts, scheduled_at, "
                   "available_at, inserted_at, meta, batch_id, parent_job_id, cron_id, "
                   "attempts, errors, attempted_by, lease")

# The insert and, for an available job, its wake-up: two statements in one simple-protocol
# message, so one round trip and one implicit transaction (NOTIFY is sent on commit). Both
# are cheaper for PostgreSQL to parse and plan than the same pair as one data-modifying CTE,
# which a server-binding cursor (one statement per execute) still uses.
_PG_INSERT_ONE = f"""
INSERT INTO kathikon_job ({_INSERT_COLUMNS})
VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s,
        0, '[]'::jsonb, '', 0)
"""
_PG_WAKE = f"; NOTIFY {notify.CHANNEL}, %s"
_PG_INSERT_ONE_CTE = f"""
WITH ins AS ({_PG_INSERT_ONE} RETURNING queue, state)
SELECT pg_notify('{notify.CHANNEL}', '{notify.AVAILABLE} ' || queue) FROM ins
WHERE state = '{JobState.AVAILABLE}'
"""

_PG_INSERT_MANY = f"""
WITH ins AS (
    INSERT INTO kathikon_job ({_INSERT_COLUMNS})
    SELECT u.*, 0, '[]'::jsonb, '', 0 FROM unnest(
        %s::uuid[], %s::text[], %s::text[], %s::jsonb[], %s::text[], %s::smallint[],
        %s::integer[], %s::timestamptz[], %s::timestamptz[], %s::timestamptz[], %s::jsonb[],
        %s::uuid[], %s::uuid[], %s::uuid[]) AS u
    RETURNING queue, state)
SELECT pg_notify('{notify.CHANNEL}', '{notify.AVAILABLE} ' || q)
FROM (SELECT DISTINCT queue AS q FROM ins WHERE state = '{JobState.AVAILABLE}') AS s
"""


_PG_COPY = f"COPY kathikon_job ({_INSERT_COLUMNS}) FROM STDIN"
# Workflow steps carry five more columns (NULL for every other job, so plain inserts skip them).
_STEP_COLUMNS = "workflow_id, step, deps_waiting, deps_failed, on_dep_failure"
_PG_COPY_STEPS = f"COPY kathikon_job ({_INSERT_COLUMNS}, {_STEP_COLUMNS}) FROM STDIN"


def _pg_values(row: JobRow) -> list[Any]:
    return [row.id, row.queue, row.worker, row.args_json, row.state, row.priority,
            row.max_attempts, row.scheduled_at, row.available_at, row.inserted_at,
            json.dumps(row.meta) if row.meta else "{}", row.batch_id, row.parent_job_id,
            row.cron_id]


def _pg_copy_values(row: JobRow) -> tuple[Any, ...]:
    """One COPY row: every column of ``_INSERT_COLUMNS`` in order, constants included."""
    return (row.id, row.queue, row.worker, row.args_json, row.state, row.priority,
            row.max_attempts, row.scheduled_at, row.available_at, row.inserted_at,
            json.dumps(row.meta) if row.meta else "{}", row.batch_id, row.parent_job_id,
            row.cron_id, 0, "[]", "", 0)


def _pg_copy_step_values(row: JobRow) -> tuple[Any, ...]:
    return (*_pg_copy_values(row), row.workflow_id, row.step, row.deps_waiting,
            row.deps_failed, row.on_dep_failure)


def insert_job(row: JobRow) -> Job:
    """Insert one job in the caller's transaction (or autocommit) and return it.

    A unique job whose key is held comes back as the holder, ``conflict`` True.
    """
    if row.unique_key is not None:
        with explain_missing_schema():
            return uniques.retrying_deadlocks(
                lambda: uniques.insert_unique_job(row, row.replace))
    alias = vendor.alias()
    connection = connections[alias]
    job = row.to_job()
    with explain_missing_schema(connection):
        if connection.vendor == "postgresql":
            _insert_one_postgres(row)
        else:
            job.save(force_insert=True, using=alias)
    job._state.adding = False
    job._state.db = alias
    return job


def _insert_one_postgres(row: JobRow) -> None:
    with prepared.cursor() as cursor:
        if not vendor.binds_on_client(cursor):
            cursor.execute(_PG_INSERT_ONE_CTE, _pg_values(row))
        elif row.state == JobState.AVAILABLE:
            cursor.execute(_PG_INSERT_ONE + _PG_WAKE,
                           [*_pg_values(row), notify.payload(notify.AVAILABLE, row.queue)])
        else:
            cursor.execute(_PG_INSERT_ONE, _pg_values(row))


def insert_jobs(rows: Sequence[JobRow], chunk_size: int = 5000) -> list[uuid.UUID]:
    """Insert many jobs with one statement per chunk (PostgreSQL: ``COPY``).

    Returns one id per row: a unique row whose key another job held gets that
    job's id (compare with ``row.id`` to tell the duplicates).
    """
    keyed = [row for row in rows if row.unique_key is not None]
    if not keyed:
        return _insert_plain(rows, chunk_size)
    with explain_missing_schema():
        return uniques.retrying_deadlocks(lambda: _insert_keyed(rows, keyed, chunk_size))


def _insert_keyed(rows: Sequence[JobRow], keyed: Sequence[JobRow],
                  chunk_size: int) -> list[uuid.UUID]:
    with vendor.atomic():
        _insert_plain([row for row in rows if row.unique_key is None], chunk_size)
        holders: dict[str, uuid.UUID] = {}
        by_replace: dict[tuple[str, ...], list[JobRow]] = {}
        for row in keyed:
            by_replace.setdefault(row.replace, []).append(row)
        for replace, group in by_replace.items():
            group = sorted(group, key=lambda row: row.unique_key or "")  # one lock order
            for start in range(0, len(group), chunk_size):
                chunk = [row for row in group[start:start + chunk_size]
                         if row.unique_key not in holders]
                if chunk:
                    holders.update(uniques.insert_unique_rows(chunk, replace))
    return [row.id if row.unique_key is None else holders[row.unique_key] for row in rows]


def _insert_plain(rows: Sequence[JobRow], chunk_size: int) -> list[uuid.UUID]:
    ids: list[uuid.UUID] = []
    with explain_missing_schema(), vendor.atomic():
        copy = vendor.is_postgres() and _can_copy()
        steps = any(row.workflow_id is not None for row in rows)
        for start in range(0, len(rows), chunk_size):
            chunk = rows[start:start + chunk_size]
            if copy:
                _copy_postgres(chunk, steps=steps)
            elif vendor.is_postgres() and not steps:
                columns = list(zip(*(_pg_values(row) for row in chunk), strict=True))
                with vendor.connection().cursor() as cursor:
                    cursor.execute(_PG_INSERT_MANY, [list(column) for column in columns])
            else:
                Job.objects.using(vendor.alias()).bulk_create(
                    [row.to_job() for row in chunk], batch_size=chunk_size)
            ids.extend(row.id for row in chunk)
        if copy:
            notify.notify(notify.AVAILABLE,
                          {row.queue for row in rows if row.state == JobState.AVAILABLE})
    return ids


def _can_copy() -> bool:
    """psycopg 3 has ``cursor.copy``; with psycopg2 the ``unnest`` INSERT is used."""
    connection = vendor.connection()
    connection.ensure_connection()
    return type(connection.connection).__module__.split(".")[0] == "psycopg"


def _copy_postgres(chunk: Sequence[JobRow], *, steps: bool = False) -> None:
    connection = vendor.connection()
    started = time.monotonic()
    sql, values = (_PG_COPY_STEPS, _pg_copy_step_values) if steps else (_PG_COPY, _pg_copy_values)
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        for row in chunk:
            copy.write_row(values(row))
    if connection.queries_logged:  # listed in connection.queries like any statement
        connection.queries_log.append({"sql": f"{sql} -- {len(chunk)} rows",
                                       "time": f"{time.monotonic() - started:.3f}"})
