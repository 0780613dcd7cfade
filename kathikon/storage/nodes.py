"""Internal: worker nodes — registration, heartbeats and the database clock they use.

Every time written here comes from the DATABASE's clock (PostgreSQL
``clock_timestamp()``, MariaDB/MySQL ``UTC_TIMESTAMP(6)``; SQLite lives on one
host, so the application's clock is the database's). The lifeline compares
heartbeats against the same clock, so skew between worker hosts can never make
a live node look silent.

A node name belongs to one live process at a time. Each process registers with
its own ``instance`` token; heartbeats and the stop marks only touch the row
while it still carries that token, so a process whose name was taken over (it
was frozen past ``RESCUE_AFTER`` and another process took the name) learns so
from its next heartbeat (:class:`NodeSuperseded`) and never marks the new
holder stopped.

A node silent for longer than ``RESCUE_AFTER`` is recorded as ``crashed`` by a
lifeline (:func:`mark_nodes_crashed`), after its jobs were rescued. That status is
what people read (admin, reports); it changes nothing the rescue decides: silence
is still judged by ``heartbeat_at``, and a crash is still charged as one (only
``stopped`` rescues without blame). A node that was only frozen keeps its row
(same ``instance``): its next heartbeat makes it ``running`` again, as a process
whose name was taken over meanwhile learns that it was superseded.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.db import IntegrityError, OperationalError
from django.db.models import Case, DateTimeField, F, Q, Value, When
from django.db.models.expressions import Func

from kathikon.exceptions import NodeNameInUse, NodeSuperseded
from kathikon.models import Node
from kathikon.storage import vendor

REGISTER_TRIES = 3  # two processes inserting one new name at once: the loser looks again


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
                  at: dt.datetime | None = None, instance: str = "",
                  exclusive_after: float | None = None,
                  gone: Callable[[Node], bool] | None = None) -> Node:
    """Take ``name`` as running with a fresh heartbeat (database clock unless ``at``).

    With ``exclusive_after`` (seconds, the worker passes ``RESCUE_AFTER``) the name
    is taken only when no other live process holds it: there is no row, or it is
    ``stopped``, silent for longer than ``exclusive_after`` by the database clock,
    already this ``instance``'s, or ``gone(row)`` says its process is dead (the
    worker checks the pid on this host). Otherwise :class:`NodeNameInUse`. The row
    is read ``FOR UPDATE`` and written in one transaction, and of two processes
    inserting a new name at the same moment one gets the unique-key error, looks
    again and finds the other live: one wins, the other is refused.

    Jobs still claimed or running under this name belong to a previous process
    that used the same name and is gone (this one has claimed nothing yet), so they
    are rescued before this returns: a restarted ``--node NAME`` never holds its
    predecessor's jobs hostage.
    """
    from kathikon.storage.rescue import rescue_jobs

    limits: dict[str, int | None] = (
        dict(queues) if isinstance(queues, Mapping) else dict.fromkeys(queues or ()))
    fields = {"hostname": hostname, "pid": pid, "queues": limits, "unknown_workers": {},
              "instance": instance,
              "status": Node.Status.RUNNING, "stopped_at": None}
    for tries in range(1, REGISTER_TRIES + 1):
        try:
            with vendor.atomic():
                row = _nodes().select_for_update().filter(name=name).first()
                if row is not None and exclusive_after is not None:
                    _refuse_if_live(row, instance, exclusive_after, gone)
                if row is None:
                    _nodes().create(name=name, **fields, started_at=at or vendor.db_now(),
                                    heartbeat_at=at or vendor.db_now())
                else:
                    _nodes().filter(name=name).update(
                        **fields, started_at=_stamp(at), heartbeat_at=_stamp(at))
            break
        except (IntegrityError, OperationalError):
            # Another process inserted the name first (or MariaDB broke the tie with a
            # deadlock): read it again, which refuses us if that process is live.
            if tries == REGISTER_TRIES:
                raise
    rescue_jobs(nodes=[name], rescuer=name, reason="restarted")
    return _nodes().get(name=name)


def _refuse_if_live(row: Node, instance: str, exclusive_after: float,
                    gone: Callable[[Node], bool] | None) -> None:
    if row.status == Node.Status.STOPPED or (instance and row.instance == instance):
        return
    silent = (vendor.db_now() - row.heartbeat_at).total_seconds()
    if silent > exclusive_after or (gone is not None and gone(row)):
        return
    raise NodeNameInUse(
        f"node name {row.name!r} is held by a live worker process (pid {row.pid} on host "
        f"{row.hostname or '?'}, {row.status}, last heartbeat {max(silent, 0.0):.1f}s ago): "
        "one node name belongs to one live process. Stop that process, or start this one "
        "with another --node (or none: the default host:pid is unique). A name whose "
        f"process died is free {_when_free(exclusive_after)}, or at once on the same host.")


def _when_free(exclusive_after: float) -> str:
    if math.isinf(exclusive_after):
        return "once it is marked stopped (RESCUE_AFTER is None: silence frees nothing)"
    return f"once its heartbeat is {exclusive_after:g}s old (RESCUE_AFTER)"


def heartbeat(name: str, *, at: dt.datetime | None = None,
              create: Mapping[str, Any] | None = None, instance: str = "") -> bool:
    """Stamp ``name``'s heartbeat (database clock unless ``at``); False if it has no row.

    A row a lifeline recorded as ``crashed`` is ``running`` again: this process was only
    frozen (its jobs were rescued meanwhile; its late acknowledgements are refused).

    With ``create`` (hostname, pid, queues), a missing row is written again as running,
    without the job rescue :func:`register_node` does (this process holds those jobs).
    With ``instance``, only a row this process still holds is stamped: a row taken
    over by another process raises :class:`NodeSuperseded`.
    """
    if _held(name, instance).update(heartbeat_at=_stamp(at), status=_REVIVED):
        return True
    if instance:
        holder = _nodes().filter(name=name).first()
        if holder is not None:
            raise NodeSuperseded(
                f"node name {name!r} was taken over by another process (pid {holder.pid} on "
                f"host {holder.hostname or '?'}) while this one was silent; its jobs were "
                "rescued")
    if create is not None:
        stamp = at or vendor.db_now()
        _nodes().get_or_create(name=name, defaults={
            **create, "instance": instance, "status": Node.Status.RUNNING,
            "started_at": stamp, "heartbeat_at": stamp})
    return False


# A heartbeat from a node recorded as crashed: it was only frozen, and lives (one statement).
_REVIVED = Case(When(status=Node.Status.CRASHED, then=Value(Node.Status.RUNNING)),
                default=F("status"))


def mark_nodes_crashed(cutoff: dt.datetime) -> list[str]:
    """Record as ``crashed`` the nodes not stopped whose heartbeat is older than ``cutoff``
    (database clock); returns their names. Rows a heartbeat holds are skipped: they live."""
    live = (Node.Status.RUNNING, Node.Status.STOPPING)
    if not _nodes().filter(status__in=live, heartbeat_at__lt=cutoff).exists():
        return []  # every lifeline tick of every node: one read, no transaction
    with vendor.atomic():
        rows = _nodes().filter(status__in=live, heartbeat_at__lt=cutoff)
        if vendor.vendor() != "sqlite":  # SQLite's single writer serialises this already
            rows = rows.select_for_update(skip_locked=True)
        names = list(rows.order_by("name").values_list("name", flat=True))
        if names:  # the same test again: the UPDATE matches exactly the rows locked
            _nodes().filter(name__in=names, status__in=live, heartbeat_at__lt=cutoff).update(
                status=Node.Status.CRASHED)
    return names


def set_node_queues(name: str, queues: Mapping[str, int], *, instance: str = "") -> bool:
    """Record the queues ``name`` runs now (it picked up a new one); False if it has no row."""
    return bool(_held(name, instance).update(queues=dict(queues)))


def set_node_unknown_workers(name: str, unknown: Mapping[str, str], *,
                             instance: str = "") -> bool:
    """Record the worker paths ``name`` holds jobs back for (it cannot import them), each
    with when it first did; the overview shows them. Cleared when the name registers."""
    return bool(_held(name, instance).update(unknown_workers=dict(unknown)))


def mark_node_stopping(name: str, *, instance: str = "") -> bool:
    """Graceful shutdown has begun (heartbeats go on until :func:`mark_node_stopped`)."""
    return bool(_held(name, instance).exclude(status=Node.Status.STOPPED)
                .update(status=Node.Status.STOPPING))


def mark_node_stopped(name: str, *, at: dt.datetime | None = None, instance: str = "") -> bool:
    """The node has exited: the lifeline rescues anything still held in its name at once.

    Call it last, after the final acknowledgements and releases. With ``instance``,
    a name another process has taken over is left alone (its jobs are not ours).
    """
    return bool(_held(name, instance).update(status=Node.Status.STOPPED,
                                             stopped_at=_stamp(at)))


def _held(name: str, instance: str) -> Any:
    """``name``'s row, and with ``instance`` only while this process still holds it."""
    rows = _nodes().filter(name=name)
    return rows.filter(instance=instance) if instance else rows


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
