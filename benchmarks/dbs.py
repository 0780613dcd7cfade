"""Create, reset, inspect and drop the benchmark database of one vendor.

``create``/``drop``/``reachable`` talk to the server with the plain driver
(before Django is set up); the rest use Django's connection.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

VENDORS = ("postgres", "mariadb", "sqlite")
LABELS = {"postgres": "PostgreSQL", "mariadb": "MariaDB", "sqlite": "SQLite"}


def db_name() -> str:
    return os.environ.get("BENCH_DB_NAME", "kathikon_bench")


def _pg_connect():
    import psycopg

    return psycopg.connect(
        host=os.environ.get("KATHIKON_PG_HOST", "127.0.0.1"),
        port=int(os.environ.get("KATHIKON_PG_PORT", "5432")),
        user=os.environ.get("KATHIKON_PG_USER", "postgres"),
        dbname="postgres", autocommit=True, connect_timeout=5)


def _my_connect():
    import MySQLdb

    return MySQLdb.connect(
        host=os.environ.get("KATHIKON_MYSQL_HOST", "127.0.0.1"),
        port=int(os.environ.get("KATHIKON_MYSQL_PORT", "3306")),
        user=os.environ.get("KATHIKON_MYSQL_USER", "root"),
        passwd=os.environ.get("KATHIKON_MYSQL_PASSWORD", ""), connect_timeout=5)


def mysql_connection():
    """A plain MySQLdb connection to the local MariaDB server (no database selected)."""
    return _my_connect()


def sqlite_path() -> Path:
    return Path(tempfile.gettempdir()) / f"{db_name()}.sqlite3"


def reachable(vendor: str) -> str | None:
    """``None`` when the server answers, else why not (the vendor is then skipped)."""
    try:
        if vendor == "postgres":
            _pg_connect().close()
        elif vendor == "mariadb":
            _my_connect().close()
    except Exception as exc:  # any driver error means "skip this database"
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
    return None


def create(vendor: str) -> None:
    """Drop and re-create the benchmark database (empty; migrate comes next)."""
    drop(vendor)
    name = db_name()
    if vendor == "postgres":
        with _pg_connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    elif vendor == "mariadb":
        conn = _my_connect()
        try:
            conn.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        finally:
            conn.close()
    else:
        sqlite3.connect(sqlite_path()).close()


def drop(vendor: str) -> None:
    name = db_name()
    if vendor == "postgres":
        with _pg_connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    elif vendor == "mariadb":
        conn = _my_connect()
        try:
            conn.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
        finally:
            conn.close()
    else:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{sqlite_path()}{suffix}").unlink(missing_ok=True)


# --- with Django set up -------------------------------------------------------------

def execute(sql: str, params: list | None = None) -> list[tuple]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        try:
            return list(cursor.fetchall())
        except Exception:  # statements without a result set
            return []


def vendor_of_connection() -> str:
    from django.db import connection

    return {"postgresql": "postgres", "mysql": "mariadb"}.get(connection.vendor, "sqlite")


def reset() -> None:
    """Empty the job tables."""
    vendor = vendor_of_connection()
    if vendor == "postgres":
        execute("TRUNCATE kathikon_job, kathikon_jobevent")
    elif vendor == "mariadb":
        execute("TRUNCATE TABLE kathikon_job")
        execute("TRUNCATE TABLE kathikon_jobevent")
    else:
        execute("DELETE FROM kathikon_job")
        execute("DELETE FROM kathikon_jobevent")


def settle_table() -> None:
    """Fresh statistics (and on PostgreSQL a checkpoint) before a measured drain."""
    vendor = vendor_of_connection()
    if vendor == "postgres":
        execute("VACUUM ANALYZE kathikon_job")
        execute("CHECKPOINT")
    elif vendor == "mariadb":
        execute("ANALYZE TABLE kathikon_job")
    else:
        execute("ANALYZE kathikon_job")
        execute("PRAGMA wal_checkpoint(TRUNCATE)")


def count_pending() -> int:
    """Jobs waiting or running: two counts, each on the partial index of its states (one
    ``state IN`` over the four matches neither, and scans a history of finished jobs)."""
    rows = execute("SELECT (SELECT count(*) FROM kathikon_job "
                   "WHERE state IN ('available', 'retryable')) + (SELECT count(*) "
                   "FROM kathikon_job WHERE state IN ('claimed', 'running'))")
    return int(rows[0][0])


def count_completed() -> int:
    return int(execute("SELECT count(*) FROM kathikon_job WHERE state = 'completed'")[0][0])


def completion_stats(queue: str | None = None) -> tuple[int, float]:
    """(completed jobs, seconds between the first and the last completion), of one queue
    or of every one."""
    rows = execute("SELECT count(*), min(completed_at), max(completed_at) FROM kathikon_job "
                   "WHERE state = 'completed'" + (" AND queue = %s" if queue else ""),
                   [queue] if queue else None)
    count, first, last = rows[0]
    if not count or first is None or last is None:
        return 0, 0.0
    if isinstance(first, str):  # SQLite hands back text
        from django.utils.dateparse import parse_datetime

        first, last = parse_datetime(first), parse_datetime(last)
    return int(count), (last - first).total_seconds()


def backend_cpu() -> float:
    """CPU seconds of the server processes serving the other connections to this database.

    PostgreSQL on this host only (a process per connection); 0 elsewhere.
    """
    if vendor_of_connection() != "postgres":
        return 0.0
    from benchmarks.procs import cpu_seconds

    rows = execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                   "AND pid <> pg_backend_pid()")
    return sum(cpu_seconds(int(pid)) for (pid,) in rows)


def server_info() -> dict[str, str]:
    """Version and the settings that matter for the figures."""
    vendor = vendor_of_connection()
    if vendor == "postgres":
        info = {"version": execute("SHOW server_version")[0][0]}
        for name in ("shared_buffers", "synchronous_commit", "fsync", "max_connections"):
            info[name] = execute(f"SHOW {name}")[0][0]
        return info
    if vendor == "mariadb":
        info = {"version": execute("SELECT VERSION()")[0][0]}
        for name in ("innodb_buffer_pool_size", "innodb_flush_log_at_trx_commit",
                     "transaction_isolation"):
            rows = execute(f"SHOW VARIABLES LIKE '{name}'")
            if rows:
                info[name] = str(rows[0][1])
        return info
    return {"version": sqlite3.sqlite_version, "journal_mode": "WAL", "synchronous": "NORMAL"}
