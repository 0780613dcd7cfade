"""Internal: the job table split by time on PostgreSQL (opt-in, docs/partitioning.md).

``kathikon_partition enable`` turns ``kathikon_job`` into a table partitioned by
RANGE on one expression, the row's *partition day*: ``'infinity'`` for every
job that is not finished, or that still holds something the live partition's
unique indexes guard (a unique key, a workflow step's name, a cron tick); for
the others the UTC day it finished. So:

- ``kathikon_job_live`` (``'infinity'``) holds the live jobs: every claim, ack,
  rescue and release works there, and its unique indexes are those of the plain
  table, under their names.
- ``kathikon_job_dYYYYMMDD`` holds one day's finished jobs. An ack moves its row
  there (PostgreSQL moves a row whose key changes), so day partitions are only
  ever inserted into: no dead tuples, no vacuum, and pruning drops them whole.
- ``kathikon_job_legacy`` is the table as it was before ``enable``, holding the
  history up to the day after ``enable``; it is dropped like a day when its last
  day expires. ``kathikon_job_default`` catches a day whose partition does not
  exist yet (the service creates days ahead, so it stays empty).

No schema change is needed on other databases: they keep the plain table.
Statements on the job path add :func:`live_only`, which names the key, so
PostgreSQL looks only at the live partition; an insert that relies on a unique
index (``ON CONFLICT``) names the live partition itself (:func:`insert_table`):
PostgreSQL does not accept a unique index on a partitioned table that leaves
out the key. Which layout a database has is read once per connection.

Partitions are created and dropped by :func:`maintain`, called by every node's
pruner under a transaction-scoped advisory lock: no leader, no race, nothing
kept in the session (PgBouncer's transaction mode is fine). Each DDL statement
waits at most ``lock_timeout`` for its lock and is tried again next round.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet

from kathikon.exceptions import KathikonError
from kathikon.states import TERMINAL_STATES
from kathikon.storage import vendor
from kathikon.storage.fragments import states_sql

TABLE = "kathikon_job"
LIVE = "kathikon_job_live"
LEGACY = "kathikon_job_legacy"
DEFAULT = "kathikon_job_default"
HISTORY = "kathikon_job_history"  # the partitioned table while ``disable`` copies it back
DAY_PREFIX = "kathikon_job_d"
#: the advisory lock (transaction-scoped) under which partitions are created and dropped
LOCK_KEY = 0x6B6174_6A6F62  # "kat" "job"
#: set on each psycopg connection once read: True when its job table is partitioned
LAYOUT = "kathikon_partitioned"

_TERMINAL = states_sql(TERMINAL_STATES)
T = TypeVar("T")


class PartitioningError(KathikonError):
    """The job table cannot be partitioned (or put back) as asked."""


def key_sql(alias: str = "") -> str:
    """The partition key of a row: its finishing day (UTC), or 'infinity' while it is live."""
    a = f"{alias}." if alias else ""
    return (f"CASE WHEN {a}state IN ({_TERMINAL}) AND {a}unique_key IS NULL "
            f"AND {a}workflow_id IS NULL AND {a}cron_id IS NULL "
            f"THEN (timezone('UTC', COALESCE({a}completed_at, {a}inserted_at)))::date "
            f"ELSE 'infinity'::date END")


def live_only(alias: str = "") -> str:
    """`` AND <key> = 'infinity'`` where the table is partitioned, so that a statement on
    live jobs looks only at the live partition; nothing on a plain table."""
    return _live_clause(alias) if partitioned() else ""


def _live_clause(alias: str) -> str:
    return f" AND ({key_sql(alias)}) = 'infinity'::date"


#: where a statement on live jobs says :func:`live_only` (``/*live:j*/`` for alias ``j``)
LIVE_MARK = "/*live*/"


def on_live(sql: str) -> str:
    """``sql`` with each ``/*live*/`` or ``/*live:<alias>*/`` mark made :func:`live_only`."""
    if "/*live" not in sql or not partitioned():
        return sql  # the marks are comments: a plain table's statement keeps them
    return _MARKS.sub(lambda match: _live_clause(match.group(1) or ""), sql)


_MARKS = re.compile(r"/\*live(?::(\w+))?\*/")


def live(queryset: QuerySet[Any]) -> QuerySet[Any]:
    """``queryset`` (of jobs) limited to live jobs' partition where the table is partitioned:
    a lookup by id then probes one index, not one per day."""
    if not partitioned(connections[queryset.db]):
        return queryset
    return queryset.extra(where=[_live_clause(TABLE).removeprefix(" AND ")])


def insert_table() -> str:
    """The table an ``INSERT … ON CONFLICT`` on the unique key names: the live partition
    where the table is partitioned (its unique indexes are the live partition's)."""
    return LIVE if partitioned() else TABLE


def partitioned(connection: BaseDatabaseWrapper | None = None) -> bool:
    """Whether this connection's job table is partitioned (read once per connection)."""
    wrapper = connection or vendor.connection()
    if wrapper.vendor != "postgresql":
        return False
    wrapper.ensure_connection()
    raw: Any = wrapper.connection
    known = getattr(raw, LAYOUT, None)
    if known is None:
        known = _read_layout(raw)
        setattr(raw, LAYOUT, known)
    return bool(known)


def forget_layout(connection: BaseDatabaseWrapper | None = None) -> None:
    """Read the layout again on the next statement (after ``enable`` or ``disable``)."""
    wrapper = connection or vendor.connection()
    raw: Any = wrapper.connection
    if raw is not None and hasattr(raw, LAYOUT):
        delattr(raw, LAYOUT)


def layout_changed(exc: BaseException) -> bool:
    """Whether an insert naming :func:`insert_table` failed because the layout changed
    since the connection read it: no unique index to infer (the table was partitioned),
    or no live partition any more (it was put back)."""
    return getattr(exc.__cause__, "sqlstate", None) in ("42P10", "42P01")


_LAYOUT_SQL = ("SELECT EXISTS (SELECT 1 FROM pg_partitioned_table "
               f"WHERE partrelid = to_regclass('{TABLE}'))")


def _read_layout(raw: Any) -> bool:
    """Outside Django's query log: the check is ours, as ``prepared`` does it."""
    if hasattr(raw, "info"):  # psycopg 3
        return bool(raw.execute(_LAYOUT_SQL).fetchone()[0])
    with raw.cursor() as cursor:  # psycopg 2
        cursor.execute(_LAYOUT_SQL)
        return bool(cursor.fetchone()[0])


def is_partitioned() -> bool:
    """Read now, whatever this connection read before."""
    if not vendor.is_postgres():
        return False
    with vendor.connection().cursor() as cursor:
        cursor.execute(_LAYOUT_SQL)
        return bool(cursor.fetchone()[0])


def expired_ids(before: dt.datetime, limit: int) -> list[Any]:
    """Finished jobs older than ``before`` that the pruner deletes row by row: those of the
    live partition (they held a key, a step or a tick) and of the default one. The day and
    legacy partitions are dropped whole instead (:func:`maintain`)."""
    parts = " UNION ALL ".join(
        f"(SELECT id, completed_at FROM {table} WHERE state IN ({_TERMINAL}) "
        f"AND completed_at < %s ORDER BY completed_at LIMIT %s)" for table in (LIVE, DEFAULT))
    with vendor.connection().cursor() as cursor:
        cursor.execute(f"SELECT id FROM ({parts}) AS e ORDER BY completed_at LIMIT %s",
                       [before, limit, before, limit, limit])
        return [row[0] for row in cursor.fetchall()]


@dataclass(frozen=True, slots=True)
class Partition:
    """One partition of the job table: its bounds (``None``: open) and its size."""

    name: str
    kind: str  # live, day, legacy, default
    lower: dt.date | None
    upper: dt.date | None
    rows: int  # PostgreSQL's estimate (pg_class.reltuples), exact enough for a report
    bytes: int  # the table with its indexes

    def expired(self, cutoff: dt.datetime) -> bool:
        """Whether every job in it finished before ``cutoff`` (day and legacy partitions)."""
        if self.kind not in ("day", "legacy") or self.upper is None:
            return False
        return _midnight(self.upper) <= cutoff


_BOUND = re.compile(r"FROM \((.+)\) TO \((.+)\)")


def partitions() -> list[Partition]:
    """The job table's partitions, oldest first (none where the table is plain)."""
    if not vendor.is_postgres():
        return []
    with vendor.connection().cursor() as cursor:
        cursor.execute("""
            SELECT c.relname, pg_get_expr(c.relpartbound, c.oid), greatest(c.reltuples, 0),
                   pg_total_relation_size(c.oid)
            FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = to_regclass(%s)""", [TABLE])
        rows = cursor.fetchall()
    found = [_partition(name, bound, int(tuples), int(size)) for name, bound, tuples, size in rows]
    order = {"legacy": 0, "day": 1, "default": 2, "live": 3}
    return sorted(found, key=lambda p: (order[p.kind], p.lower or dt.date.min))


def _partition(name: str, bound: str, rows: int, size: int) -> Partition:
    if bound == "DEFAULT":
        return Partition(name, "default", None, None, rows, size)
    match = _BOUND.search(bound)
    lower, upper = (_date(match.group(1)), _date(match.group(2))) if match else (None, None)
    kind = "live" if name == LIVE else "legacy" if name == LEGACY else "day"
    return Partition(name, kind, lower, upper, rows, size)


def _date(text: str) -> dt.date | None:
    value = text.strip("'")
    if value in ("MINVALUE", "MAXVALUE", "infinity"):
        return None
    return dt.date.fromisoformat(value)


def _midnight(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time.min, tzinfo=dt.timezone.utc)


def day_name(day: dt.date) -> str:
    return f"{DAY_PREFIX}{day:%Y%m%d}"


@dataclass(frozen=True, slots=True)
class Enabled:
    """What ``enable`` did: how long the job table was locked, and what it created."""

    locked_seconds: float
    live_rows: int  # moved into the live partition
    legacy_rows: int  # finished jobs kept in kathikon_job_legacy (0: none, not created)
    created: list[str]


def enable(*, ahead: int = 3, lock_timeout: float = 10.0,
           today: dt.date | None = None) -> Enabled:
    """Partition the job table in one transaction (PostgreSQL).

    Holds an exclusive lock on ``kathikon_job`` while it moves the live jobs into
    the new live partition and PostgreSQL checks the old table's rows against
    their partition's bounds: one pass over the table (figures in the docs).
    Waits at most ``lock_timeout`` seconds for that lock.
    """
    if not vendor.is_postgres():
        raise PartitioningError("partitioning needs PostgreSQL: MariaDB and SQLite keep the "
                                "plain job table")
    today = today or vendor.db_now().date()
    connection = vendor.connection()
    with transaction.atomic(using=vendor.alias()), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{int(lock_timeout * 1000)}ms'")
        cursor.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        if is_partitioned():
            raise PartitioningError("the job table is partitioned already")
        cursor.execute("SELECT to_regclass(%s), to_regclass(%s)", [LIVE, HISTORY])
        if any(cursor.fetchone()):
            raise PartitioningError(f"{LIVE} or {HISTORY} exists: finish `kathikon_partition "
                                    "disable` first")
        indexes = _index_definitions(cursor, TABLE)
        cursor.execute(f"ALTER TABLE {TABLE} RENAME TO {LEGACY}")
        for name, _, _ in indexes:
            cursor.execute(f'ALTER INDEX "{name}" RENAME TO "{_renamed(name, LEGACY)}"')
        like = "INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS"
        cursor.execute(f"CREATE TABLE {TABLE} (LIKE {LEGACY} {like}) "
                       f"PARTITION BY RANGE (({key_sql()}))")
        cursor.execute(f"CREATE TABLE {LIVE} (LIKE {LEGACY} {like})")
        for name, definition, primary in indexes:
            cursor.execute(_on_table(definition, LIVE))
            if primary:
                cursor.execute(f'ALTER TABLE {LIVE} ADD CONSTRAINT "{name}" '
                               f'PRIMARY KEY USING INDEX "{name}"')
        columns = _columns(cursor, LEGACY)
        cursor.execute(f"""
            WITH moved AS (DELETE FROM {LEGACY} WHERE ({key_sql()}) = 'infinity'::date
                           RETURNING {columns})
            INSERT INTO {LIVE} ({columns}) SELECT {columns} FROM moved""")
        live_rows = cursor.rowcount
        cursor.execute(f"ALTER TABLE {TABLE} ATTACH PARTITION {LIVE} "
                       "FOR VALUES FROM ('infinity') TO (MAXVALUE)")
        cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {LEGACY})")
        created = [LIVE]
        first_day = today
        if cursor.fetchone()[0]:
            first_day = today + dt.timedelta(days=1)
            cursor.execute(f"ALTER TABLE {TABLE} ATTACH PARTITION {LEGACY} "
                           f"FOR VALUES FROM (MINVALUE) TO ('{first_day.isoformat()}')")
            created.append(LEGACY)
        else:
            cursor.execute(f"DROP TABLE {LEGACY}")
        cursor.execute(f"CREATE TABLE {DEFAULT} (LIKE {LIVE} INCLUDING ALL)")
        cursor.execute(f"ALTER TABLE {TABLE} ATTACH PARTITION {DEFAULT} DEFAULT")
        created.append(DEFAULT)
        for offset in range((today + dt.timedelta(days=ahead) - first_day).days + 1):
            created.append(_create_day(cursor, first_day + dt.timedelta(days=offset)))
        locked = time.monotonic() - started
    forget_layout(connection)
    legacy_rows = 0
    if LEGACY in created:  # counted once the table is unlocked: a pass of its own
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {LEGACY}")
            legacy_rows = cursor.fetchone()[0]
    return Enabled(locked_seconds=locked, live_rows=live_rows, legacy_rows=legacy_rows,
                   created=created)


def _inherited_index_names(cursor: Any, partition: str) -> list[tuple[str, str]]:
    """``(index, its parent's name)`` for the indexes of ``partition`` that belong to an
    index of the partitioned table: those a migration added while the table was
    partitioned, which PostgreSQL named after the partition (``kathikon_job_live_…``)."""
    cursor.execute("""
        SELECT child.relname, parent.relname
        FROM pg_index x
        JOIN pg_inherits i ON i.inhrelid = x.indexrelid
        JOIN pg_class child ON child.oid = x.indexrelid
        JOIN pg_class parent ON parent.oid = i.inhparent
        WHERE x.indrelid = %s::regclass ORDER BY 1""", [partition])
    return [(own, name) for own, name in cursor.fetchall()]


def _index_definitions(cursor: Any, table: str) -> list[tuple[str, str, bool]]:
    cursor.execute("""
        SELECT c.relname, pg_get_indexdef(i.indexrelid), i.indisprimary
        FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid = to_regclass(%s) ORDER BY c.relname""", [table])
    return [(name, definition, bool(primary)) for name, definition, primary in cursor.fetchall()]


def _renamed(name: str, table: str) -> str:
    """An index ``name`` of the job table, moved under ``table``'s name (63 characters)."""
    return (name.replace(TABLE, table, 1) if name.startswith(TABLE) else f"{table}_{name}")[:63]


_ON = re.compile(r" ON (?:ONLY )?(?:\S+\.)?" + TABLE + r" USING ")


def _on_table(definition: str, table: str) -> str:
    """``pg_get_indexdef`` of an index of ``kathikon_job``, made for ``table``."""
    sql, count = _ON.subn(f" ON {table} USING ", definition, count=1)
    if count != 1:
        raise PartitioningError(f"cannot read this index definition: {definition}")
    return sql


def _columns(cursor: Any, table: str) -> str:
    cursor.execute("SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) "
                   "FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
                   "AND NOT attisdropped", [table])
    return cursor.fetchone()[0]


def _create_day(cursor: Any, day: dt.date) -> str:
    """A partition for ``day``, made beside the table and then attached: ATTACH locks the
    job table less than ``CREATE TABLE … PARTITION OF`` would. Rows of that day that went
    to the default partition (no partition existed) move into it first."""
    name = day_name(day)
    after = (day + dt.timedelta(days=1)).isoformat()
    cursor.execute(f"CREATE TABLE {name} (LIKE {LIVE} INCLUDING ALL)")
    columns = _columns(cursor, name)
    cursor.execute(f"""
        WITH moved AS (DELETE FROM {DEFAULT} WHERE ({key_sql()}) >= '{day.isoformat()}'
                       AND ({key_sql()}) < '{after}' RETURNING {columns})
        INSERT INTO {name} ({columns}) SELECT {columns} FROM moved""")
    cursor.execute(f"ALTER TABLE {TABLE} ATTACH PARTITION {name} "
                   f"FOR VALUES FROM ('{day.isoformat()}') TO ('{after}')")
    return name


@dataclass(frozen=True, slots=True)
class Maintained:
    created: list[str]
    dropped: list[str]
    skipped: list[str]  # a lock not granted within lock_timeout: next round


def maintain(*, now: dt.datetime, retention: dt.timedelta, ahead: int = 3,
             lock_timeout: float = 2.0) -> Maintained:
    """Create the day partitions up to ``ahead`` days from ``now`` and drop the ones whose
    jobs all finished more than ``retention`` ago. One transaction per change, each under
    the advisory lock: nodes doing it at once wait for each other, then find it done."""
    created: list[str] = []
    dropped: list[str] = []
    skipped: list[str] = []
    if not partitions():  # a plain table (or not PostgreSQL): one catalog read
        return Maintained(created, dropped, skipped)
    today = now.astimezone(dt.timezone.utc).date()
    for offset in range(ahead + 1):
        day = today + dt.timedelta(days=offset)
        name = day_name(day)
        done = _locked(functools.partial(_create_missing, day=day), lock_timeout)
        if done is None:
            skipped.append(name)
        elif done:
            created.append(name)
    for partition in partitions():
        if partition.expired(now - retention):
            done = _locked(functools.partial(_dropped, name=partition.name), lock_timeout)
            if done is None:
                skipped.append(partition.name)
            elif done:
                dropped.append(partition.name)
    return Maintained(created, dropped, skipped)


def create_days(first: dt.date, last: dt.date, *, lock_timeout: float = 10.0) -> list[str]:
    """Make sure each day from ``first`` to ``last`` has its partition (history loaded from
    elsewhere, a backfill); returns the partitions created."""
    created = []
    day = first
    while day <= last:
        if _locked(functools.partial(_create_missing, day=day), lock_timeout):
            created.append(day_name(day))
        day += dt.timedelta(days=1)
    return created


def _locked(action: Callable[[Any], T], lock_timeout: float) -> T | None:
    """``action`` in its own transaction under the advisory lock; None when a lock on the
    job table was not granted in time (nothing changed)."""
    from django.db import OperationalError

    try:
        with transaction.atomic(using=vendor.alias()), vendor.connection().cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
            cursor.execute(f"SET LOCAL lock_timeout = '{int(lock_timeout * 1000)}ms'")
            return action(cursor)
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == "55P03":  # lock_not_available
            return None
        raise


def _create_missing(cursor: Any, day: dt.date) -> bool:
    for partition in partitions():  # read under the lock: what the last node made is seen
        if partition.kind in ("day", "legacy") and (
                partition.lower is None or partition.lower <= day) and (
                partition.upper is None or day < partition.upper):
            return False
    _create_day(cursor, day)
    return True


def _drop(cursor: Any, name: str, *, count: bool = False) -> int | None:
    """Drop a partition whose jobs all expired, with their history events; how many jobs
    it held when ``count`` (else 0), None when another node dropped it first."""
    cursor.execute("SELECT to_regclass(%s)", [name])
    if cursor.fetchone()[0] is None:
        return None
    rows = 0
    if count:
        cursor.execute(f"SELECT count(*) FROM {name}")
        rows = cursor.fetchone()[0]
    cursor.execute(f"DELETE FROM kathikon_jobevent WHERE job_id IN (SELECT id FROM {name})")
    cursor.execute(f"DROP TABLE {name}")
    return rows


def _dropped(cursor: Any, name: str) -> bool:
    return _drop(cursor, name) is not None


def drop_expired(before: dt.datetime, *, lock_timeout: float = 10.0) -> int:
    """Drop the partitions whose jobs all finished before ``before``; how many jobs went
    (``kathikon_ops prune``). Nothing on a plain table."""
    total = 0
    for partition in partitions():
        if partition.expired(before):
            done = _locked(functools.partial(_drop, name=partition.name, count=True),
                           lock_timeout)
            total += done or 0
    return total


@dataclass(frozen=True, slots=True)
class Disabled:
    locked_seconds: float
    copied: int  # finished jobs copied back into the plain table
    dropped: int  # finished jobs not copied back (``keep_history=False``)


def disable(*, keep_history: bool = True, lock_timeout: float = 10.0,
            progress: Callable[[str, int], None] | None = None) -> Disabled:
    """The way back: the live partition becomes the plain ``kathikon_job`` again.

    One short locked transaction detaches the live partition and gives it the table's
    name (the job path runs on again at once); then each day's finished jobs are copied
    back, one transaction per partition, and the partitioned remains dropped. Run it
    again after an interruption: it goes on where it stopped.
    """
    if not vendor.is_postgres():
        raise PartitioningError("the job table is only ever partitioned on PostgreSQL")
    connection = vendor.connection()
    locked = 0.0
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [HISTORY])
        resuming = cursor.fetchone()[0] is not None
    if not resuming:
        if not is_partitioned():
            raise PartitioningError("the job table is not partitioned")
        with transaction.atomic(using=vendor.alias()), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{int(lock_timeout * 1000)}ms'")
            cursor.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            inherited = _inherited_index_names(cursor, LIVE)
            cursor.execute(f"ALTER TABLE {TABLE} DETACH PARTITION {LIVE}")
            cursor.execute(f"ALTER TABLE {TABLE} RENAME TO {HISTORY}")
            cursor.execute(f"ALTER TABLE {LIVE} RENAME TO {TABLE}")
            for own, name in inherited:  # the names Django's migrations know come back
                cursor.execute(f'ALTER INDEX "{name}" RENAME TO "{_renamed(name, HISTORY)}"')
                cursor.execute(f'ALTER INDEX "{own}" RENAME TO "{name}"')
            locked = time.monotonic() - started
        forget_layout(connection)
    copied = dropped = 0
    with connection.cursor() as cursor:
        cursor.execute("""
            SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = to_regclass(%s) ORDER BY c.relname""", [HISTORY])
        names = [name for (name,) in cursor.fetchall()]
    columns = None
    for name in names:
        with transaction.atomic(using=vendor.alias()), connection.cursor() as cursor:
            columns = columns or _columns(cursor, TABLE)
            if keep_history:
                cursor.execute(f"INSERT INTO {TABLE} ({columns}) SELECT {columns} FROM {name}")
                copied += cursor.rowcount
            else:
                cursor.execute(f"DELETE FROM kathikon_jobevent "
                               f"WHERE job_id IN (SELECT id FROM {name})")
                cursor.execute(f"SELECT count(*) FROM {name}")
                dropped += cursor.fetchone()[0]
            cursor.execute(f"DROP TABLE {name}")
        if progress is not None:
            progress(name, copied + dropped)
    with transaction.atomic(using=vendor.alias()), connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {HISTORY}")
    return Disabled(locked_seconds=locked, copied=copied, dropped=dropped)
