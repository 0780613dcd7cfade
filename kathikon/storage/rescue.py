"""Internal: rescuing jobs held by vanished nodes — the lifeline's SQL.

A job that is ``claimed`` or ``running`` is rescued when the node it names in
``attempted_by``

- has stopped heartbeating (``heartbeat_at`` older than the cut-off, database clock),
- is recorded as ``stopped`` (it exited; anything still in its name is an orphan),
- or has no node row at all and the job started before the cut-off (external
  runners using ``kathikon.claim()`` have no heartbeats: they get ``RESCUE_AFTER``
  to finish).

A parent job whose batch is still open is never rescued: it legitimately stays
``running`` until the batch is closed.

The crash budget (docs/reliability.md). A node that stopped heartbeating, or whose
name a new process took over, *crashed*: one of its jobs may have taken it down
(``os._exit``, a segfault, the OOM killer), and nobody can tell which. So

- a job that was running beside others gets its attempt back and becomes a crash
  *suspect* (``suspect``): ordinary claims skip it, and a process with nothing
  else running claims it alone (``storage.quarantine``);
- a job that was running alone under its quarantine claim (``quarantine_lease``
  equals its ``lease``) is the culprit: the crash is charged to it (``crashes``
  goes up, the attempt counts, error kind ``kathikon.WorkerCrashed``), and after
  ``CRASH_LIMIT`` such crashes, or its last attempt, it is ``dead``.

A node recorded as ``stopped`` exited on purpose: its leftovers get their attempt
back and nobody is blamed. A node the lifeline recorded as ``crashed`` (silent past
``RESCUE_AFTER``, see ``storage.nodes``) is judged by its heartbeat like any silent
node: its jobs are a crash's, charged as above. A job held under a name with no node
row (an external runner's ``claim()``) has used its attempt, as before.

Rescue is fenced like every write after a claim: the UPDATE matches only while
the job is still executing under the ``lease`` that was read, so a job that
moved on is left alone and a node that wakes up later finds its own
acknowledgements refused. On PostgreSQL and MariaDB the candidates are locked
with ``FOR UPDATE SKIP LOCKED`` so lifelines on many nodes split the work
instead of rescuing a job twice; SQLite's single writer serialises them.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Exists, OuterRef, Q

from kathikon.exceptions import NodeVanished, WorkerCrashed, error_kind
from kathikon.models import Batch, Job, Node
from kathikon.states import EXECUTING_STATES, JobState
from kathikon.storage import notify, vendor
from kathikon.storage.events import record_event
from kathikon.storage.partitions import live
from kathikon.storage.settle import settle, step_members
from kathikon.storage.uniques import key_after
from kathikon.unique import holds

logger = logging.getLogger("kathikon.runtime")

ERROR_KIND = error_kind(NodeVanished)
CRASH_KIND = error_kind(WorkerCrashed)
CRASH_LIMIT = 3  # crashes while running alone before a job is dead


@dataclass(frozen=True, slots=True)
class Rescued:
    """One rescued job: the job as written, the node that vanished, and its new state."""

    job: Job
    node: str
    state: str


def rescue_jobs(cutoff: dt.datetime | None = None, *, nodes: Sequence[str] | None = None,
                rescuer: str = "", reason: str = "", now: dt.datetime | None = None,
                limit: int = 500, send_signals: bool = True) -> list[Rescued]:
    """Rescue up to ``limit`` jobs held by vanished nodes; returns what was rescued.

    Either ``cutoff`` (heartbeats older than this are stale; database clock) or
    ``nodes`` (rescue everything these nodes hold, e.g. a restarted name) must be given.
    ``now`` stamps the rescue (default: the database clock).
    """
    if cutoff is None and nodes is None:
        raise ValueError("rescue_jobs needs a cutoff or nodes")
    if nodes is not None and not nodes:
        return []
    with vendor.atomic():
        now = now or vendor.db_now()
        candidates = _candidates(cutoff, nodes, limit)
        if not candidates:
            return []
        known = {node.name: node for node in Node.objects.using(vendor.alias())
                 .filter(name__in={job.attempted_by for job in candidates})}
        rescued = [r for job in candidates
                   if (r := _rescue_one(job, known.get(job.attempted_by), now, rescuer, reason))]
        for item in rescued:  # a workflow step out of attempts settles like any dead step
            if item.job.workflow_id is not None and item.state == JobState.DEAD:
                item.job.settled = settle(
                    step_members([(item.job.id, item.job.workflow_id, item.state)]), now=now)
        notify.notify(notify.AVAILABLE,
                      {r.job.queue for r in rescued if r.state == JobState.RETRYABLE})
    if send_signals:
        _send_signals(rescued)
    return rescued


def held_jobs(node: str) -> list[Job]:
    """The jobs ``node`` currently holds (claimed or running)."""
    return list(Job.objects.using(vendor.alias())
                .filter(attempted_by=node, state__in=EXECUTING_STATES).order_by("id"))


def _candidates(cutoff: dt.datetime | None, nodes: Sequence[str] | None,
                limit: int) -> list[Job]:
    using = vendor.alias()
    query = live(Job.objects.using(using).filter(state__in=EXECUTING_STATES))
    if nodes is not None:
        query = query.filter(attempted_by__in=list(nodes))
    else:
        all_nodes = Node.objects.using(using)
        stale = all_nodes.filter(Q(status=Node.Status.STOPPED) | Q(heartbeat_at__lt=cutoff))
        query = query.filter(
            Q(attempted_by__in=stale.values("name"))
            | (~Q(attempted_by__in=all_nodes.values("name")) & Q(started_at__lt=cutoff)))
    open_batch = Batch.objects.using(using).filter(parent_job_id=OuterRef("id"),
                                                   status=Batch.Status.OPEN)
    query = query.exclude(Exists(open_batch)).order_by("id")
    if vendor.vendor() != "sqlite":
        # Another lifeline's candidates are skipped, not waited for: each job is rescued once.
        query = query.select_for_update(skip_locked=True)
    return list(query[:limit])


def _rescue_one(job: Job, node: Node | None, now: dt.datetime, rescuer: str,
                reason: str) -> Rescued | None:
    vanished, attempt = job.attempted_by, job.attempts
    changes: dict[str, Any] = _verdict(job, node, reason)
    state = changes["state"]
    kind = CRASH_KIND if "crashes" in changes else ERROR_KIND
    message = _message(job, node, now, reason) + _consequence(job, changes)
    error = {"attempt": attempt, "at": now.isoformat(), "node": vanished,
             "started_at": job.started_at.isoformat() if job.started_at else None,
             "kind": kind, "message": message, "traceback": ""}
    changes["errors"] = [*job.errors, error]
    if state == JobState.DEAD:
        changes["completed_at"] = now
    else:
        changes["available_at"] = now
    # Fenced: only while the job is still executing under the lease we read.
    written = live(Job.objects.using(vendor.alias()).filter(
        id=job.id, lease=job.lease, state__in=EXECUTING_STATES)).update(
            **changes, unique_key=key_after(state))
    if not written:
        return None
    for name, value in changes.items():
        setattr(job, name, value)
    if not holds(job.unique_states, state):
        job.unique_key = None
    record_event(job.id, "rescued", actor=rescuer, at=now, node=vanished, state=state,
                 attempt=attempt, error=kind, suspect=job.suspect, crashes=job.crashes)
    return Rescued(job=job, node=vanished, state=state)


def _verdict(job: Job, node: Node | None, reason: str) -> dict[str, Any]:
    """The new state, attempts and crash fields of a rescued job (see the module doc)."""
    alone = job.quarantine_lease is not None and job.quarantine_lease == job.lease
    if node is None:  # an external runner's claim: the attempt was used
        return {"state": _retry_or_dead(job.attempts >= job.max_attempts)}
    restored = max(0, job.attempts - 1)
    if reason != "restarted" and node.status == Node.Status.STOPPED:
        # It exited on purpose; nothing crashed. A quarantined job is still a suspect.
        return {"state": JobState.RETRYABLE, "attempts": restored,
                "suspect": job.suspect or alone}
    if not alone:
        return {"state": JobState.RETRYABLE, "attempts": restored, "suspect": True}
    crashes = job.crashes + 1
    dead = crashes >= CRASH_LIMIT or job.attempts >= job.max_attempts
    return {"state": _retry_or_dead(dead), "crashes": crashes, "suspect": not dead}


def _retry_or_dead(dead: bool) -> str:
    return JobState.DEAD if dead else JobState.RETRYABLE


def _consequence(job: Job, changes: dict[str, Any]) -> str:
    if "crashes" in changes:
        crashes = changes["crashes"]
        times = "once" if crashes == 1 else f"{crashes} times"
        if changes["state"] != JobState.DEAD:
            return (f"; it was running alone, so it crashed its worker: it has crashed its "
                    f"worker {times} (limit {CRASH_LIMIT}); it runs alone again")
        why = (f"the crash limit ({CRASH_LIMIT})" if crashes >= CRASH_LIMIT
               else f"its last attempt ({job.max_attempts})")
        return (f"; it was running alone, so it crashed its worker: it has crashed its worker "
                f"{times}, which reached {why}; dead")
    if "attempts" in changes:
        then = (" and runs alone in a worker process next (crash suspect)"
                if changes.get("suspect") else "")
        return f"; the attempt does not count{then}"
    return ""


def _message(job: Job, node: Node | None, now: dt.datetime, reason: str) -> str:
    name = job.attempted_by or "(unnamed)"
    if reason == "restarted":
        return f"node {name} restarted while holding this job; its previous process is gone"
    if node is None:
        started = (now - job.started_at).total_seconds() if job.started_at else 0.0
        return (f"node {name} has no heartbeat record and the job started {started:.0f}s "
                "ago; presumed vanished")
    if node.status == Node.Status.STOPPED:
        return f"node {name} stopped while holding this job"
    silent = (now - node.heartbeat_at).total_seconds()
    return (f"node {name} stopped heartbeating (last heartbeat "
            f"{node.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC, {silent:.0f}s before the rescue)")


def _send_signals(rescued: Sequence[Rescued]) -> None:
    from kathikon import signals
    from kathikon.exceptions import KathikonError
    from kathikon.jobspec import worker_class
    from kathikon.workers import Worker

    for item in rescued:
        logger.warning("kathikon rescued job %s (%s) from node %s: now %s",
                       item.job.id.hex, item.job.worker, item.node, item.state)
        try:
            sender: type = worker_class(item.job.worker)[1]
        except KathikonError:
            sender = Worker
        signals.send(signals.job_rescued, sender, job=item.job, node=item.node,
                     state=item.state)
