"""Internal: which database holds the job tables, and how to talk to it."""

from __future__ import annotations

import datetime as dt
import logging
from contextlib import AbstractContextManager

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from kathikon import conf

logger = logging.getLogger("kathikon")


def alias() -> str:
    return conf.database()


def connection() -> BaseDatabaseWrapper:
    return connections[alias()]


def vendor() -> str:
    """``postgresql``, ``mysql`` (MariaDB too) or ``sqlite``."""
    return connection().vendor


def is_postgres() -> bool:
    return vendor() == "postgresql"


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
