"""Internal: worker nodes — registration, heartbeats and the database clock they use.

Every time written here comes from the DATABASE's clock (PostgreSQL
``clock_timestamp()``, MariaDB/MySQL ``UTC_TIMESTAMP(6)``; SQLite lives on one
host, so the application's clock is the database's). The lifeline compares
heartbeats against the same clock, so skew between worker hosts can never make
a live node look silent.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from django.db.models import DateTimeField, Q
from django.db.models.expressions import Func

from kathikon.models import Node
from kathikon.storage import vendor


class DatabaseNow(Func):
    """The database server's current time, as an expression usable in UPDATE/INSERT."""

    template = "CURRENT_TIMESTAMP"

    def __init__(self) -> None:
        super().__init__(output_field=DateTimeField())

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # clock_timestamp(), not now(): now() is frozen at the start of the transaction.
        return "clock_timestamp()", []

    def as_mysql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # Django stores aware datetimes as naive UTC in MySQL; UTC_TIMESTAMP ignores the
        # session time zone, CURRENT_TIMESTAMP would not.
        return "UTC_TIMESTAMP(6)", []

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        value = connection.ops.adapt_datetimefield_value(vendor.now())
        return "%s", [value]


def _nodes() -> Any:
    return Node.objects.using(vendor.alias())


def _stamp(at: dt.datetime | None) -> Any:
    return DatabaseNow() if at is None else at


def register_node(name: str, hostname: str = "", pid: int | None = None,
                  queues: Mapping[str, int] | Sequence[str] | None = None, *,
                  at: dt.datetime | None = None) -> Node:
    """Upsert ``name`` as running with a fresh heartbeat (database clock unless ``at``).

    Jobs still claimed or running under this name belong to a previous process that
    used the same name and is gone (this one has claimed nothing yet), so they are
    rescued before this returns: a restarted ``--node NAME`` never holds its
    predecessor's jobs hostage.
    """
    from kathikon.storage.rescue import rescue_jobs

    limits: dict[str, int | None] = (
        dict(queues) if isinstance(queues, Mapping) else dict.fromkeys(queues or ()))
    fields = {"hostname": hostname, "pid": pid, "queues": limits,
              "status": Node.Status.RUNNING, "stopped_at": None}
    with vendor.atomic():
        updated = _nodes().filter(name=name).update(
            **fields, started_at=_stamp(at), heartbeat_at=_stamp(at))
        if not updated:
            _nodes().create(name=name, **fields, started_at=at or vendor.db_now(),
                            heartbeat_at=at or vendor.db_now())
    rescue_jobs(nodes=[name], rescuer=name, reason="restarted")
    return _nodes().get(name=name)


def heartbeat(name: str, *, at: dt.datetime | None = None,
              create: Mapping[str, Any] | None = None) -> bool:
    """Stamp ``name``'s heartbeat (database clock unless ``at``); False if it has no row.

    With ``create`` (hostname, pid, queues), a missing row is written again as running,
    without the job rescue :func:`register_node` does (this process holds those jobs).
    """
    if _nodes().filter(name=name).update(heartbeat_at=_stamp(at)):
        return True
    if create is not None:
        stamp = at or vendor.db_now()
        _nodes().get_or_create(name=name, defaults={
            **create, "status": Node.Status.RUNNING, "started_at": stamp, "heartbeat_at": stamp})
    return False


def set_node_queues(name: str, queues: Mapping[str, int]) -> bool:
    """Record the queues ``name`` runs now (it picked up a new one); False if it has no row."""
    return bool(_nodes().filter(name=name).update(queues=dict(queues)))


def mark_node_stopping(name: str) -> bool:
    """Graceful shutdown has begun (heartbeats go on until :func:`mark_node_stopped`)."""
    return bool(_nodes().filter(name=name).exclude(status=Node.Status.STOPPED)
                .update(status=Node.Status.STOPPING))


def mark_node_stopped(name: str, *, at: dt.datetime | None = None) -> bool:
    """The node has exited: the lifeline rescues anything still held in its name at once.

    Call it last, after the final acknowledgements and releases.
    """
    return bool(_nodes().filter(name=name).update(status=Node.Status.STOPPED,
                                                  stopped_at=_stamp(at)))


def fetch_node(name: str) -> Node | None:
    return _nodes().filter(name=name).first()


def live_nodes(cutoff: dt.datetime) -> list[Node]:
    """Nodes not stopped whose heartbeat is at or after ``cutoff``."""
    return list(_nodes().exclude(status=Node.Status.STOPPED).filter(heartbeat_at__gte=cutoff))


def stale_nodes(cutoff: dt.datetime) -> list[Node]:
    """Nodes stopped, or silent since before ``cutoff`` (database clock)."""
    return list(_nodes().filter(_stale(cutoff)))


def delete_stale_nodes(before: dt.datetime) -> int:
    """Forget nodes stopped before ``before``, or silent since then; returns how many."""
    stopped = Q(status=Node.Status.STOPPED)
    stale = (stopped & Q(stopped_at__lt=before)) | (~stopped & Q(heartbeat_at__lt=before))
    return int(_nodes().filter(stale).delete()[0])


def _stale(cutoff: dt.datetime) -> Q:
    return Q(status=Node.Status.STOPPED) | Q(heartbeat_at__lt=cutoff)
