"""Internal: which database holds the job tables, and how to talk to it."""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.utils import timezone

from kathikon import conf

logger = logging.getLogger("kathikon")
T = TypeVar("T")


#: The alias of this thread's (or task's) work when it is not ``DATABASE``: a queue on
#: another database (``KATHIKON["QUEUES"][name]["database"]``), or the one a worker serves.
_using: ContextVar[str | None] = ContextVar("kathikon_database", default=None)


def alias() -> str:
    return _using.get() or conf.database()


def serve(database: str) -> None:
    """This thread, and the threads it starts from now on, work on ``database``: the one
    database of a worker process (``kathikon_worker --database``, or one child per alias)."""
    _using.set(database)


def using(database: str) -> AbstractContextManager[None]:
    """Storage works on ``database`` here (threads a worker starts inherit it)."""
    return _set(_using, database)


@contextmanager
def _set(variable: ContextVar[T], value: T) -> Iterator[None]:
    token = variable.set(value)
    try:
        yield
    finally:
        variable.reset(token)


def connection() -> BaseDatabaseWrapper:
    return connections[alias()]


#: True inside :func:`primary_reads`: this thread's (or task's) reports read the primary.
_primary_reads: ContextVar[bool] = ContextVar("kathikon_primary_reads", default=False)


def read_alias() -> str:
    """Where reports read: ``READ_DATABASE`` (a replica) or the primary. Never written.
    Inside :func:`primary_reads` always the primary."""
    current = alias()
    if _primary_reads.get() or current != conf.database():
        return current  # READ_DATABASE replicates DATABASE, not a queue's other database
    return conf.read_database()


def primary_reads() -> AbstractContextManager[None]:
    """Reports read the primary here: an action decides on fresh rows, not a replica's."""
    return _set(_primary_reads, True)


def read_connection() -> BaseDatabaseWrapper:
    return connections[read_alias()]


def vendor() -> str:
    """``postgresql``, ``mysql`` (MariaDB too) or ``sqlite``."""
    return connection().vendor


def is_postgres() -> bool:
    return vendor() == "postgresql"


def binds_on_client(cursor: CursorWrapper) -> bool:
    """True when the driver writes the parameters into the query text (psycopg 2, and
    psycopg 3's ``ClientCursor``, Django's default): one ``execute`` may then carry several
    statements. Not with ``OPTIONS={"server_side_binding": True}``."""
    return _class_binds_on_client(cursor.cursor.__class__)


@functools.cache
def _class_binds_on_client(cursor_class: Any) -> bool:
    if cursor_class.__module__.startswith("psycopg2"):
        return True
    from psycopg import ClientCursor  # a psycopg 3 cursor: the driver is installed

    return issubclass(cursor_class, ClientCursor)


def load_timestamps_natively(cursor: Any) -> None:
    """Have psycopg 3 load this cursor's ``timestamptz`` columns with its own (C) loader.

    Django registers a Python subclass of it that sets each value's ``tzinfo`` to the
    connection's time zone; in a UTC session psycopg already gives ``timezone.utc``, so
    the values are the same, built without a Python call each (the claim loads three per
    job). Other time zones, and psycopg 2, keep Django's loader.
    """
    connection = cursor.db
    driver = cursor.cursor
    if connection.timezone is not dt.timezone.utc or not hasattr(driver, "adapters"):
        return
    loader = _native_timestamptz_loader()
    if loader is not None:
        driver.adapters.register_loader("timestamptz", loader)


@functools.cache
def _native_timestamptz_loader() -> Any:
    from psycopg import postgres
    from psycopg.pq import Format

    return postgres.adapters.get_loader(postgres.types["timestamptz"].oid, Format.TEXT)


def reset_connection(database: str | None = None) -> None:
    """After a database error: close this thread's connection so the next query reconnects.

    A broken connection stays broken until closed. One inside an ``atomic`` block is
    left alone: closing it would break the transaction its owner is still in.
    """
    try:
        wrapper = connections[database or alias()]
        if not wrapper.in_atomic_block:
            wrapper.close()
    except Exception:  # closing a dead connection can fail too; the next query reconnects
        logger.debug("closing the broken %r connection failed", database or alias(),
                     exc_info=True)


def atomic() -> AbstractContextManager[None]:
    return transaction.atomic(using=alias())


def now() -> dt.datetime:
    """The time written into rows (the application's clock, aware, UTC)."""
    return timezone.now()


def db_now() -> dt.datetime:
    """The database server's clock: cut-offs that compare hosts use it, not ours."""
    if is_postgres():
        with connection().cursor() as cursor:
            cursor.execute("SELECT clock_timestamp()")
            return cursor.fetchone()[0]
    if vendor() == "mysql":
        with connection().cursor() as cursor:
            cursor.execute("SELECT UTC_TIMESTAMP(6)")
            value = cursor.fetchone()[0]
        return value.replace(tzinfo=dt.timezone.utc)
    return timezone.now()  # SQLite: one host, the application's clock is the database's


def table(model: type) -> str:
    return connection().ops.quote_name(model._meta.db_table)  # type: ignore[attr-defined]
