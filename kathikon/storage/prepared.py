"""Internal: a cursor whose statements PostgreSQL keeps parsed and planned.

The statements on every job's path (the single insert, the claim, the ack) have the
same text each time. Django's default cursor binds parameters on the client and
switches psycopg's prepared statements off, so PostgreSQL parses and plans each one
anew: for a one-job claim that is about two thirds of its server time (0.43 of
0.65 ms here). This cursor binds on the server and has psycopg prepare each
statement on its first run, after which only the parameters travel.

Django leaves prepared statements off for connection poolers: one in transaction
mode (PgBouncer before 1.21) may run the next transaction in another server
session, where the statement does not exist. So they are used only where the client
talks to PostgreSQL itself. Poolers hand their clients a backend pid of their own
(PgBouncer a random one), so a connection whose pid differs from ``pg_backend_pid()``
keeps the ordinary cursor; so does psycopg 2, a connection whose time zone is not
UTC, and ``KATHIKON["PREPARED_STATEMENTS"] = False``. While Django records queries
(``DEBUG``, ``CaptureQueriesContext``) the statements run plain too, so that
``connection.queries`` shows them with their values, as it shows every other one.

PostgreSQL plans a prepared statement again after another session's schema change,
but refuses to run one whose result columns changed type; the cursor then drops the
session's plans and runs the statement again.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from kathikon import conf
from kathikon.storage import vendor

#: set on each psycopg connection once checked: True when it reaches PostgreSQL itself
DIRECT = "kathikon_direct"
NEVER_BY_COUNT = 2**62


def cursor() -> CursorWrapper:
    """A cursor of Kathikon's connection that prepares its statements where that is safe."""
    connection = vendor.connection()
    if connection.vendor != "postgresql" or not conf.prepared_statements():
        return connection.cursor()
    if connection.queries_logged:  # DEBUG, CaptureQueriesContext: logged with their values
        return connection.cursor()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    if not prepares(connection):
        return connection.cursor()
    connection.validate_thread_sharing()
    with connection.wrap_database_errors:
        driver = _preparing_cursor_class()(connection.connection)
    return connection.make_cursor(driver)


def prepares(connection: BaseDatabaseWrapper) -> bool:
    """True when ``connection`` (open, PostgreSQL) may prepare statements: see the module."""
    raw: Any = connection.connection
    if not hasattr(raw, "prepare_threshold"):  # psycopg 2
        return False
    if connection.timezone is not dt.timezone.utc:
        return False
    direct = getattr(raw, DIRECT, None)
    if direct is None:
        direct = _reaches_postgres(connection, raw)
        setattr(raw, DIRECT, direct)
        if direct and raw.prepare_threshold is None:
            # Django's default, which would refuse even ``prepare=True``; a threshold no
            # statement reaches keeps every other statement of the connection unprepared.
            raw.prepare_threshold = NEVER_BY_COUNT
    return bool(direct)


def reaches_postgres(alias: str) -> bool:
    """Whether this thread's connection of ``alias`` (PostgreSQL) talks to PostgreSQL
    itself, not to a pooler such as PgBouncer: a worker's ``LISTEN`` needs that."""
    connection = connections[alias]
    connection.ensure_connection()
    raw: Any = connection.connection
    direct = getattr(raw, DIRECT, None)
    if direct is None:
        direct = _reaches_postgres(connection, raw)
        setattr(raw, DIRECT, direct)
    return bool(direct)


def _reaches_postgres(connection: BaseDatabaseWrapper, raw: Any) -> bool:
    """Once per connection, not logged in ``connection.queries``: the check is ours."""
    with connection.wrap_database_errors:
        if not hasattr(raw, "info"):  # psycopg 2
            with raw.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                row = cursor.fetchone()
            return bool(row) and row[0] == raw.get_backend_pid()
        row = raw.execute("SELECT pg_backend_pid()").fetchone()
    return bool(row) and row[0] == raw.info.backend_pid


@functools.cache
def _preparing_cursor_class() -> type:
    """Django's server-binding cursor, preparing each statement it runs (psycopg 3)."""
    from django.db.backends.postgresql import base
    from psycopg.errors import FeatureNotSupported

    server_binding: Any = base.ServerBindingCursor

    class PreparingCursor(server_binding):
        def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None,
                    binary: bool | None = None) -> Any:
            if prepare is False:
                return super().execute(query, params, prepare=False, binary=binary)
            try:
                return super().execute(query, params, prepare=True, binary=binary)
            except FeatureNotSupported as exc:
                if "cached plan" not in str(exc) or not self.connection.autocommit:
                    raise
            # Another session changed the type of a column this statement returns (only the
            # claim returns table columns, from the worker's autocommit connection). The
            # failed statement did nothing: drop the session's plans (psycopg forgets its
            # own on DEALLOCATE ALL) and run it again, prepared anew.
            self.connection.execute("DEALLOCATE ALL")
            return super().execute(query, params, prepare=True, binary=binary)

    return PreparingCursor
