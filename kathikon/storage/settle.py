"""Internal: settling workflow steps — the fan-in, decided in the transaction of the change.

A step waits while ``deps_waiting`` (its dependencies not settled yet) is above
zero. Whatever moves a workflow step into a final state (an ack, a cancel, a
rescue, ``complete_in_transaction``) calls :func:`settle` in the same
transaction; whatever moves one out again (a retry) calls it with ``undo``. It:

1. reads, with a locking read, the edges that point at the settled steps (and
   at workflows that finish on the way),
2. locks the steps that wait on them (in id order) and adds to their counters:
   the locked row is the latest committed one and nobody else can change it
   before this transaction ends, so of any number of processes settling the
   deps of one fan-in at once, exactly one sees its counter reach zero,
3. moves those steps on: ``available`` (released), ``held``, or ``cancelled``
   by their ``on_dep_failure`` policy — a cancel settles in turn, so the loop
   goes on down the graph,
4. counts the settled steps off their workflows (locked after the job rows, in
   id order): a workflow whose last step settles finishes, exactly once, and
   settles what waits on it (other workflows' steps, its parent workflow).

Lock order everywhere: job rows, then workflow rows. Jobs outside workflows
never reach this module (the caller checks ``workflow_id`` in memory). On
PostgreSQL steps 1-4 (their common cases: counts, releases, workflow counts) are one
statement (kathikon.storage.settle_postgres); the rarer moves follow in Python.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from kathikon.models import Job, Workflow, WorkflowDep
from kathikon.states import JobState
from kathikon.storage import notify, vendor
from kathikon.storage import settle_postgres as postgres
from kathikon.storage.settle_postgres import STEP_FIELDS
from kathikon.storage.settled import (
    CANCEL,
    DEP_FAILED,
    FAILED_STATES,
    HOLD,
    POLICIES,
    RUN,
    TOUCHED_STATES,
    Member,
    Settled,
    step_members,
    workflow_counts,
)
from kathikon.storage.uniques import key_after

_CHUNK = 1000  # ids per IN (…): SQLite binds at most 32,766 parameters


def settle(members: Sequence[Member], *, now: dt.datetime | None = None) -> Settled:
    """Inside the caller's transaction: propagate ``members`` down their graphs."""
    return _propagate(list(members), Settled(), now or vendor.now())


def evaluate(step_ids: Sequence[uuid.UUID], *, now: dt.datetime | None = None) -> Settled:
    """Move waiting steps whose counters already decide (inserted after a dependency had
    failed, or with none left to wait for) on, and propagate: used by inserts."""
    settled, now = Settled(), now or vendor.now()
    return _propagate(_move(_lock_steps(step_ids), {}, now, settled), settled, now)


def _propagate(frontier: list[Member], settled: Settled, now: dt.datetime) -> Settled:
    while frontier:
        counts = workflow_counts(frontier)
        if vendor.is_postgres():  # steps 1-4 in one statement, the rows come back counted
            rows, delta, workflows = postgres.count(frontier, counts, now, settled)
            following = _move(rows, delta, now, settled, counted=True)
            following += _finish(workflows, counts, now, settled, counted=True)
        else:
            following = _dependents(frontier, now, settled)
            following += _finish(_workflows_locked(sorted(counts)), counts, now, settled)
        frontier = following
    notify.notify(notify.AVAILABLE, settled.queues)
    return settled


# -- steps ----------------------------------------------------------------------------------


def _dependents(frontier: list[Member], now: dt.datetime, settled: Settled) -> list[Member]:
    """Add the frontier to the counters of the steps that wait on it; returns what settled."""
    by_id = {member.id: member for member in frontier}
    delta: dict[uuid.UUID, list[int]] = defaultdict(lambda: [0, 0])
    for waiter, on_job, on_workflow in _edges(frontier):
        member = by_id[on_job or on_workflow]  # type: ignore[index]
        change = delta[waiter]
        if member.undo:
            change[0] += 1
            change[1] -= int(member.failed)
        else:
            change[0] -= 1
            change[1] += int(member.failed)
    if not delta:
        return []
    rows = _lock_steps(list(delta))
    return _move(rows, delta, now, settled)


def _edges(frontier: list[Member]) -> list[tuple[uuid.UUID, uuid.UUID | None, uuid.UUID | None]]:
    """The edges onto the frontier, read with a lock: the latest committed ones (MariaDB's
    plain reads see the transaction's first snapshot), and none can be added meanwhile."""
    jobs = [member.id for member in frontier if not member.is_workflow]
    workflows = [member.id for member in frontier if member.is_workflow]
    edges: list[tuple[uuid.UUID, uuid.UUID | None, uuid.UUID | None]] = []
    for column, ids in (("dep_job_id__in", jobs), ("dep_workflow_id__in", workflows)):
        for chunk in _chunks(ids):
            edges += list(_deps().select_for_update().filter(**{column: chunk}).order_by()
                          .values_list("job_id", "dep_job_id", "dep_workflow_id"))
    return edges



def _lock_steps(ids: Sequence[uuid.UUID]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for chunk in _chunks(sorted(ids)):
        rows += list(_jobs().select_for_update().filter(id__in=chunk, state__in=TOUCHED_STATES)
                     .order_by("id").values(*STEP_FIELDS))
    return rows


def _move(rows: list[dict[str, Any]], delta: dict[uuid.UUID, list[int]], now: dt.datetime,
          settled: Settled, *, counted: bool = False) -> list[Member]:
    """New counters and states of the locked ``rows``; equal changes go in one UPDATE.

    ``counted``: the rows hold their new counters already (written by ``_PG_COUNT``, which
    released what it could); only the other state changes are left to write.
    """
    groups: dict[tuple[int, int, str, str], list[uuid.UUID]] = defaultdict(list)
    following: list[Member] = []
    for row in rows:
        change = delta.get(row["id"], [0, 0])
        if counted:
            waiting, failed = row["deps_waiting"] or 0, row["deps_failed"] or 0
        else:
            waiting = max(0, (row["deps_waiting"] or 0) + change[0])
            failed = max(0, (row["deps_failed"] or 0) + change[1])
        state = _next_state(row, waiting, failed, undo=change[0] > 0, now=now)
        if state != row["state"]:
            if state in (JobState.AVAILABLE, JobState.SCHEDULED):
                settled.released[row["workflow_id"]].append((row["id"].hex, row["step"]))
                if state == JobState.AVAILABLE:
                    settled.queues.add(row["queue"])
            elif state == JobState.HELD:
                settled.held.append(row["id"])
            elif state == JobState.CANCELLED:
                settled.cancelled.append(row["id"])
                following.append(Member(row["id"], row["workflow_id"], True))
            if row["state"] == JobState.CANCELLED:  # restored: its own waiters wait again
                following.append(Member(row["id"], row["workflow_id"], True, undo=True))
        elif change == [0, 0] or counted:
            continue
        groups[(waiting, failed, row["state"], state)].append(row["id"])
    for (waiting, failed, before, after), ids in groups.items():
        changes: dict[str, Any] = {"deps_waiting": waiting, "deps_failed": failed}
        if after != before:
            changes.update(_entering(before, after, now))
        for chunk in _chunks(ids):
            _jobs().filter(id__in=chunk).update(**changes)
    return following


def _next_state(row: dict[str, Any], waiting: int, failed: int, *, undo: bool,
                now: dt.datetime) -> str:
    state, policy = row["state"], row["on_dep_failure"] or CANCEL
    if state == JobState.WAITING:
        if failed and policy == CANCEL:
            return JobState.CANCELLED
        if waiting:
            return state
        if failed and policy == HOLD:
            return JobState.HELD
        return JobState.SCHEDULED if row["available_at"] > now else JobState.AVAILABLE
    if state == JobState.HELD and waiting:
        return JobState.WAITING  # the failed dependency is being retried
    if (state == JobState.CANCELLED and undo and not failed and policy == CANCEL
            and _cancelled_by_dep(row)):
        return JobState.WAITING
    return state


def _cancelled_by_dep(row: dict[str, Any]) -> bool:
    errors = row["errors"] or []
    return bool(errors) and errors[-1].get("kind") == DEP_FAILED


def _entering(before: str, after: str, now: dt.datetime) -> dict[str, Any]:
    """The columns a step's move from ``before`` into ``after`` writes besides its counters."""
    changes: dict[str, Any] = {"state": after, "unique_key": key_after(after)}
    if after == JobState.AVAILABLE:
        changes["available_at"] = now  # its queue time starts now, not at insert
    elif after == JobState.CANCELLED:
        changes.update(completed_at=now, cancelled_at=now, errors=[dep_error(now)])
    elif after == JobState.WAITING and before == JobState.CANCELLED:
        changes.update(completed_at=None, cancelled_at=None, errors=[])
    return changes


def dep_error(now: dt.datetime) -> dict[str, Any]:
    """The error entry of a step its ``cancel`` policy cancelled."""
    return {"attempt": 0, "at": now.isoformat(), "kind": DEP_FAILED, "node": "",
            "message": "cancelled: a dependency ended dead or cancelled (on_dep_failure is "
                       "'cancel'); retrying that dependency restores this step",
            "traceback": ""}


# -- workflows ------------------------------------------------------------------------------


def _finish(rows: list[Workflow], delta: dict[uuid.UUID, list[int]], now: dt.datetime,
            settled: Settled, *, counted: bool = False) -> list[Member]:
    """Finish or reopen the counted workflows (``rows``, locked, in id order).

    ``counted``: the rows hold their new counters already (written by ``_PG_COUNT``).
    """
    following: list[Member] = []
    for workflow in rows:
        if counted:  # the row holds its new counters already
            unfinished, failed = workflow.steps_unfinished, workflow.steps_failed
            changes: dict[str, Any] = {}
        else:
            unfinished = max(0, workflow.steps_unfinished + delta[workflow.id][0])
            failed = max(0, workflow.steps_failed + delta[workflow.id][1])
            changes = {"steps_unfinished": unfinished, "steps_failed": failed}
        running = workflow.status == Workflow.Status.RUNNING
        if running and unfinished == 0:
            status = (Workflow.Status.CANCELLED if workflow.cancelled_at is not None
                      else Workflow.Status.FAILED if failed else Workflow.Status.COMPLETED)
            changes.update(status=status, finished_at=now)
            following.append(Member(workflow.id, workflow.parent_workflow_id,
                                    status != Workflow.Status.COMPLETED, is_workflow=True))
        elif not running and unfinished > 0:  # a step was retried: it runs again, and a
            # person's retry in a cancelled workflow takes the cancel back
            changes.update(status=Workflow.Status.RUNNING, finished_at=None, cancelled_at=None)
            following.append(Member(workflow.id, workflow.parent_workflow_id,
                                    workflow.status != Workflow.Status.COMPLETED,
                                    is_workflow=True, undo=True))
        if changes:
            _workflow_rows().filter(pk=workflow.pk).update(**changes)
        for name, value in changes.items():
            setattr(workflow, name, value)
        if "finished_at" in changes and workflow.finished_at is not None:
            settled.finished.append(workflow)
    return following


def _workflows_locked(ids: Sequence[uuid.UUID]) -> list[Workflow]:
    if not ids:
        return []
    return list(_workflow_rows().select_for_update().filter(pk__in=list(ids)).order_by("id"))


# -- helpers --------------------------------------------------------------------------------


def _jobs() -> Any:
    return Job.objects.using(vendor.alias())


def _deps() -> Any:
    return WorkflowDep.objects.using(vendor.alias())


def _workflow_rows() -> Any:
    return Workflow.objects.using(vendor.alias())


def _chunks(ids: Sequence[Any]) -> Iterable[list[Any]]:
    ids = list(ids)
    for start in range(0, len(ids), _CHUNK):
        yield ids[start:start + _CHUNK]


__all__ = ["CANCEL", "DEP_FAILED", "FAILED_STATES", "HOLD", "POLICIES", "RUN", "Member",
           "Settled", "dep_error", "evaluate", "settle", "step_members"]
