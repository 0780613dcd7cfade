"""Internal: is Kathikon's schema in place? A missing or outdated table is a deploy step
left out (``manage.py migrate``), not a database outage: say so instead of retrying or
leaking a raw ``ProgrammingError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.executor import MigrationExecutor

from kathikon.exceptions import NotMigrated
from kathikon.storage import vendor

# PostgreSQL SQLSTATEs and MySQL/MariaDB error numbers for "no such table / column".
_PG_CODES = frozenset({"42P01", "42703"})  # undefined_table, undefined_column
_MYSQL_CODES = frozenset({1146, 1054})  # ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR
_SQLITE_MESSAGES = ("no such table", "no such column", "has no column named")


def is_missing_schema(exc: BaseException) -> bool:
    """True if ``exc`` (Django's error or the driver's own, as psycopg's ``COPY`` raises)
    says one of Kathikon's tables or columns does not exist."""
    if "kathikon_" not in str(exc):
        return False
    for error in (exc, exc.__cause__):
        code = getattr(error, "sqlstate", None) or getattr(error, "pgcode", None)
        if code is not None:
            return code in _PG_CODES
    if not isinstance(exc, DatabaseError):
        return False
    if exc.args and isinstance(exc.args[0], int):
        return exc.args[0] in _MYSQL_CODES
    return any(message in str(exc) for message in _SQLITE_MESSAGES)


def not_migrated(detail: str) -> NotMigrated:
    """The error to raise, naming the database alias and the step to run."""
    hint = "" if vendor.alias() == "default" else f" --database {vendor.alias()}"
    return NotMigrated(f"Kathikon's tables in the database {vendor.alias()!r} are missing or "
                       f"out of date ({detail}): run `python manage.py migrate{hint}`")


@contextmanager
def explain_missing_schema(connection: BaseDatabaseWrapper | None = None) -> Iterator[None]:
    """Turn "no such table/column" from a Kathikon statement into ``NotMigrated``.

    On PostgreSQL the failed statement has aborted the surrounding transaction, as
    any SQL error does: leave the ``atomic`` block (a statement run in its own
    savepoint, like ``insert_many``'s, leaves the caller's transaction usable).
    MariaDB and SQLite only refused the statement, so the caller's block stays
    usable there: the rollback mark Django's ORM set for this error is lifted.
    """
    if connection is None:
        connection = vendor.connection()
    marked = connection.needs_rollback
    try:
        yield
    except Exception as exc:  # Django's DatabaseError, or the driver's (psycopg's COPY)
        if not is_missing_schema(exc):
            raise
        if connection.in_atomic_block and not marked and connection.vendor != "postgresql":
            transaction.set_rollback(False, using=connection.alias)
        raise not_migrated(str(exc).strip().splitlines()[0]) from exc


def pending_migrations() -> list[str]:
    """Kathikon's migrations not applied to its database (all of them on an empty one)."""
    executor = MigrationExecutor(vendor.connection())
    targets = [node for node in executor.loader.graph.leaf_nodes() if node[0] == "kathikon"]
    return [migration.name for migration, backwards in executor.migration_plan(targets)
            if not backwards]
