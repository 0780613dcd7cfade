"""Internal: which database a queue's jobs live in, and the alias an API call works on.

A queue may live in another database than ``KATHIKON["DATABASE"]`` (its
``"database"`` option, docs/scaling.md). ``insert`` works on its queue's
database, an action on a job on the database that holds it, a queue's pause on
the queue's. Batches, workflows and cron schedules keep their own rows in
``DATABASE`` and refuse queues elsewhere: their bookkeeping and their jobs must
change in one transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from kathikon import conf
from kathikon.exceptions import InvalidJob
from kathikon.storage import vendor
from kathikon.storage.jobs import database_of, ids_in


def for_queue(name: str) -> AbstractContextManager[None]:
    """Storage works on ``name``'s database inside."""
    return vendor.using(conf.queue_database(name))


def for_queues(names: Iterable[str], what: str) -> AbstractContextManager[None]:
    """One database for all of ``names`` (one transaction); ``InvalidJob`` if they span
    several, before anything is written."""
    found = {conf.queue_database(name): name for name in names}
    if len(found) > 1:
        shown = ", ".join(f"{queue!r} in {alias!r}" for alias, queue in sorted(found.items()))
        raise InvalidJob(f"{what} puts jobs into queues on different databases ({shown}); "
                         "one call writes one database: split it by database", key="queue")
    return vendor.using(next(iter(found))) if found else nullcontext()


def for_loaded(row: Any) -> AbstractContextManager[None]:
    """Storage works on the database ``row`` (a model instance) was read from."""
    database = getattr(getattr(row, "_state", None), "db", None)
    return vendor.using(database) if database else nullcontext()


def for_job(job_id: object) -> AbstractContextManager[None]:
    """Storage works on the database that holds the job (this one when there is one only)."""
    databases = conf.databases()
    if len(databases) == 1:
        return nullcontext()
    found = database_of(job_id, databases)
    return vendor.using(found) if found else nullcontext()


def by_database(ids: list[uuid.UUID]) -> list[tuple[str, list[uuid.UUID]]]:
    """``ids`` grouped by the database that holds each (this thread's first; ids found
    nowhere stay with it, for the caller's "no such job")."""
    databases = conf.databases()
    current = vendor.alias()
    if len(databases) == 1 or not ids:
        return [(current, ids)]
    left, groups = list(ids), []
    for database in sorted(databases, key=lambda name: name != current):
        found = ids_in(database, left)
        groups.append((database, [pk for pk in left if pk in found]))
        left = [pk for pk in left if pk not in found]
    groups[0][1].extend(left)
    return [(database, pks) for database, pks in groups if pks]


def require_home(names: Iterable[str], what: str) -> None:
    """``InvalidJob`` for a queue of ``names`` outside ``KATHIKON["DATABASE"]``."""
    home = conf.database()
    for name in names:
        if conf.queue_database(name) != home:
            raise InvalidJob(f"{what} cannot use the queue {name!r}: it lives in the database "
                             f"{conf.queue_database(name)!r}, and {what} keeps its rows in "
                             f"KATHIKON['DATABASE'] ({home!r}); use a queue of that database",
                             key="queue")
