"""Internal: which database holds the job tables, and how to talk to it."""

from __future__ import annotations

import datetime as dt
from contextlib import AbstractContextManager

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from kathikon import conf


def alias() -> str:
    return conf.database()


def connection() -> BaseDatabaseWrapper:
    return connections[alias()]


def vendor() -> str:
    """``postgresql``, ``mysql`` (MariaDB too) or ``sqlite``."""
    return connection().vendor


def is_postgres() -> bool:
    return vendor() == "postgresql"


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
