"""Internal: inserting unique jobs, and freeing a key when its job leaves the unique states.

The database enforces uniqueness: ``kathikon_job_unique_key`` is a unique index
on ``unique_key`` (partial where the database has partial indexes), and a row
outside its unique states holds NULL there. An insert that clashes does
nothing (or updates the ``replace`` fields of the existing job) in the same
statement — PostgreSQL and SQLite ``ON CONFLICT``, MariaDB ``ON DUPLICATE KEY
UPDATE`` — then the existing job is read by its key. Never check-then-insert:
two inserters racing for a key both end on the same row.

Every statement that changes a job's state also writes ``unique_key`` through
``key_after`` / ``key_after_sql``: kept when the new state is one of the job's
unique states (the bits of ``unique_states``), NULL otherwise.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import OperationalError, ProgrammingError
from django.db.models import Case, F, Value, When
from django.db.models.lookups import GreaterThan

from kathikon.backoff import failure_delay
from kathikon.jobspec import JobRow
from kathikon.models import Job
from kathikon.states import JobState
from kathikon.storage import notify, vendor
from kathikon.storage.errors import lost_a_race
from kathikon.storage.fragments import states_sql
from kathikon.storage.partitions import forget_layout, insert_table, layout_changed
from kathikon.storage.rows import JOB_COLUMNS, fetch_jobs
from kathikon.unique import STATE_BITS

COLUMNS = ("id, queue, worker, args, state, priority, max_attempts, scheduled_at, "
           "available_at, inserted_at, meta, batch_id, parent_job_id, cron_id, unique_key, "
           "unique_states, attempts, errors, attempted_by, lease")
_REPLACE_WHEN = states_sql((JobState.SCHEDULED, JobState.AVAILABLE, JobState.RETRYABLE))
_CONFLICT = "ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL"
_ATTEMPTS = 5  # a key freed between the clash and the read: insert again (rare)
_DEADLOCK_RETRIES = 20
T = TypeVar("T")


def key_after(state: str) -> Case:
    """ORM expression for ``unique_key`` in an update that moves jobs to ``state``."""
    bit = STATE_BITS[state]
    return Case(When(GreaterThan(F("unique_states").bitand(bit), 0), then=F("unique_key")),
                default=Value(None))


def key_after_sql(state: str, table: str = "") -> str:
    """SQL for ``unique_key = …`` in a raw UPDATE that moves jobs to ``state``."""
    prefix = f"{table}." if table else ""
    bit = STATE_BITS[state]
    return f"CASE WHEN {prefix}unique_states & {bit} <> 0 THEN {prefix}unique_key END"


def retrying_deadlocks(action: Callable[[], T]) -> T:
    """Run ``action`` (a whole transaction); on MariaDB retry it after an InnoDB deadlock.

    Concurrent inserts of one key take shared then exclusive locks on it, which
    InnoDB may resolve by rolling one transaction back. When Kathikon owns the
    transaction it simply runs it again; inside the caller's transaction the
    error is the caller's (the whole transaction was rolled back).
    """
    if vendor.vendor() != "mysql" or vendor.connection().in_atomic_block:
        return action()
    for attempt in range(_DEADLOCK_RETRIES):
        try:
            return action()
        except OperationalError as exc:
            if not lost_a_race(exc) or attempt == _DEADLOCK_RETRIES - 1:
                raise
            time.sleep(random.uniform(0, failure_delay(attempt, base=0.005, cap=0.05)))
    raise AssertionError("unreachable")


def insert_unique_job(row: JobRow, replace: Sequence[str] = ()) -> Job:
    """Insert one unique job, or return the job holding its key (``conflict`` True)."""
    key = row.unique_key or ""
    for _ in range(_ATTEMPTS):
        ids = _insert_rows([row], replace)
        if ids.get(key) == row.id:
            job = row.to_job()
            job._state.adding = False
            job._state.db = vendor.alias()
            return job
        holder = _holders([key]).get(key)
        if holder is not None:
            holder.conflict = True
            return holder
    raise RuntimeError(f"unique key {row.unique_key} kept changing hands; insert abandoned")


def insert_unique_rows(rows: Sequence[JobRow], replace: Sequence[str] = ()) -> dict[str, uuid.UUID]:
    """Insert rows carrying keys (one statement); returns each key's holder id afterwards.

    Rows whose key another job holds are not inserted: their key maps to that
    job's id. Duplicates within ``rows`` map to the first of them.
    """
    pending = {row.unique_key or "": row for row in reversed(rows)}  # the first spec wins
    holders: dict[str, uuid.UUID] = {}
    for _ in range(_ATTEMPTS):
        batch = [pending[key] for key in sorted(pending)]  # one lock order for every inserter
        known = _insert_rows(batch, replace)
        holders.update(known)
        missing = [key for key in pending if key not in known]
        found = _holder_ids(missing) if missing else {}
        holders.update(found)
        pending = {key: pending[key] for key in missing if key not in found}
        if not pending:
            return holders
    raise RuntimeError("unique keys kept changing hands; insert abandoned")


def _insert_rows(rows: Sequence[JobRow], replace: Sequence[str]) -> dict[str, uuid.UUID]:
    """One statement; known holders afterwards: the keys of the rows inserted (or replaced)
    and their ids, and on MariaDB the holders of every key (read in the same transaction)."""
    kind = vendor.vendor()
    if kind == "postgresql":
        return _insert_postgres(rows, replace)
    if kind == "sqlite":
        return _insert_sqlite(rows, replace)
    return _insert_mysql(rows, replace)


def _values(row: JobRow, connection: Any) -> list[Any]:
    ops = connection.ops
    return [_id(row.id, connection),
            row.queue, row.worker, row.args_json, row.state, row.priority, row.max_attempts,
            ops.adapt_datetimefield_value(row.scheduled_at),
            ops.adapt_datetimefield_value(row.available_at),
            ops.adapt_datetimefield_value(row.inserted_at), _dump(row.meta),
            _id(row.batch_id, connection), _id(row.parent_job_id, connection),
            _id(row.cron_id, connection), row.unique_key, row.unique_states]


def _id(value: uuid.UUID | None, connection: Any) -> Any:
    if value is None or connection.vendor == "postgresql":
        return value
    return value.hex


def _dump(meta: dict[str, Any]) -> str:
    import json

    return json.dumps(meta) if meta else "{}"


def _set_replaced(replace: Sequence[str], new: str, old: str) -> list[str]:
    """Assignments for ``replace``; ``new``/``old`` format a column as inserted / existing."""
    sets: list[str] = []
    for name in replace:
        if name == "scheduled_at":
            sets += [f"scheduled_at = {new.format('scheduled_at')}",
                     f"available_at = {new.format('available_at')}"]
        else:
            sets.append(f"{name} = {new.format(name)}")
    if "scheduled_at" in replace:  # last: MariaDB applies assignments left to right
        sets.append(f"state = CASE WHEN {old.format('state')} = 'retryable' THEN 'retryable' "
                    f"ELSE {new.format('state')} END")
    return sets


# ``INSERT INTO {table} AS kathikon_job``: the live partition where the table is partitioned
# (storage.partitions.insert_table: the unique index is the live partition's).
_PG_INSERT_ONE = f"""
WITH ins AS (
    INSERT INTO {{table}} AS kathikon_job ({COLUMNS})
    VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s,
            0, '[]'::jsonb, '', 0)
    {_CONFLICT} DO NOTHING
    RETURNING id, unique_key, queue, state)
SELECT unique_key, id, (SELECT count(*) FROM (
    SELECT pg_notify('{notify.CHANNEL}', '{notify.AVAILABLE} ' || queue) FROM ins
    WHERE state = '{JobState.AVAILABLE}') AS woke) FROM ins
"""


def _insert_postgres(rows: Sequence[JobRow], replace: Sequence[str]) -> dict[str, uuid.UUID]:
    try:
        return _insert_postgres_once(rows, replace)
    except ProgrammingError as exc:
        if not layout_changed(exc) or vendor.connection().in_atomic_block:
            raise
        # `kathikon_partition enable` or `disable` ran since this connection read the layout:
        # the statement failed whole, nothing was written; read the layout and go again.
        forget_layout()
        return _insert_postgres_once(rows, replace)


def _insert_postgres_once(rows: Sequence[JobRow],
                          replace: Sequence[str]) -> dict[str, uuid.UUID]:
    if len(rows) == 1 and not replace:  # the single insert: VALUES, no arrays to build
        with vendor.connection().cursor() as cursor:
            cursor.execute(_PG_INSERT_ONE.format(table=insert_table()),
                           _values(rows[0], vendor.connection()))
            return {key: _uuid(pk) for key, pk, _ in cursor.fetchall()}
    columns = list(zip(*(_values(row, vendor.connection()) for row in rows), strict=True))
    if replace:
        sets = ", ".join(_set_replaced(replace, "EXCLUDED.{}", "kathikon_job.{}"))
        action = f"DO UPDATE SET {sets} WHERE kathikon_job.state IN ({_REPLACE_WHEN})"
    else:
        action = "DO NOTHING"
    sql = f"""
    WITH ins AS (
        INSERT INTO {insert_table()} AS kathikon_job ({COLUMNS})
        SELECT u.*, 0, '[]'::jsonb, '', 0 FROM unnest(
            %s::uuid[], %s::text[], %s::text[], %s::jsonb[], %s::text[], %s::smallint[],
            %s::integer[], %s::timestamptz[], %s::timestamptz[], %s::timestamptz[],
            %s::jsonb[], %s::uuid[], %s::uuid[], %s::uuid[], %s::text[], %s::smallint[]) AS u
        {_CONFLICT} {action}
        RETURNING id, unique_key, queue, state),
    woke AS (
        SELECT pg_notify('{notify.CHANNEL}', '{notify.AVAILABLE} ' || q)
        FROM (SELECT DISTINCT queue AS q FROM ins WHERE state = '{JobState.AVAILABLE}') AS s)
    SELECT unique_key, id, (SELECT count(*) FROM woke) FROM ins
    """
    with vendor.connection().cursor() as cursor:
        cursor.execute(sql, [list(column) for column in columns])
        return {key: _uuid(pk) for key, pk, _ in cursor.fetchall()}


def _insert_sqlite(rows: Sequence[JobRow], replace: Sequence[str]) -> dict[str, uuid.UUID]:
    connection = vendor.connection()
    if replace:
        sets = ", ".join(_set_replaced(replace, "excluded.{}", "kathikon_job.{}"))
        action = f"DO UPDATE SET {sets} WHERE kathikon_job.state IN ({_REPLACE_WHEN})"
    else:
        action = "DO NOTHING"
    one = "(" + ", ".join(["%s"] * 16) + ", 0, '[]', '', 0)"
    sql = (f"INSERT INTO kathikon_job ({COLUMNS}) VALUES {', '.join([one] * len(rows))} "
           f"{_CONFLICT} {action} RETURNING unique_key, id")
    params = [value for row in rows for value in _values(row, connection)]
    with vendor.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {key: _uuid(pk) for key, pk in cursor.fetchall()}


def _insert_mysql(rows: Sequence[JobRow], replace: Sequence[str]) -> dict[str, uuid.UUID]:
    """``ON DUPLICATE KEY UPDATE``, then read the keys' holders (MariaDB has no RETURNING
    on an upsert that tells inserted from kept)."""
    connection = vendor.connection()
    if replace:
        sets = _set_replaced(replace, "VALUES({})", "{}")
        guarded = [f"{name} = IF(state IN ({_REPLACE_WHEN}), {value}, {name})"
                   for name, _, value in (assignment.partition(" = ") for assignment in sets)]
        action = ", ".join(guarded)
    else:
        action = "id = id"
    one = "(" + ", ".join(["%s"] * 16) + ", 0, '[]', '', 0)"
    sql = (f"INSERT INTO kathikon_job ({COLUMNS}) VALUES {', '.join([one] * len(rows))} "
           f"ON DUPLICATE KEY UPDATE {action}")
    params = [value for row in rows for value in _values(row, connection)]
    with vendor.atomic():
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
        holders = _holder_ids([row.unique_key or "" for row in rows])
    return holders


def _holders(keys: Sequence[str]) -> dict[str, Job]:
    using = vendor.alias()
    if vendor.is_postgres():
        with vendor.connection().cursor() as cursor:
            jobs = fetch_jobs(cursor, f"SELECT {JOB_COLUMNS} FROM kathikon_job "
                                      "WHERE unique_key = ANY(%s)", [list(keys)])
            return {job.unique_key: job for job in jobs}  # type: ignore[misc]
    return {job.unique_key: job  # type: ignore[misc]
            for job in Job.objects.using(using).filter(unique_key__in=list(keys)).order_by()}


def _holder_ids(keys: Sequence[str]) -> dict[str, uuid.UUID]:
    found = (Job.objects.using(vendor.alias()).filter(unique_key__in=list(keys))
             .order_by().values_list("unique_key", "id"))
    return {key: pk for key, pk in found if key is not None}


def _uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(value)
