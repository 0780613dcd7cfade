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
never reach this module (the caller checks ``workflow_id`` in memory).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kathikon.models import Job, Workflow, WorkflowDep
from kathikon.states import JobState
from kathikon.storage import notify, prepared, vendor
from kathikon.storage.uniques import key_after, key_after_sql

CANCEL, RUN, HOLD = "cancel", "run", "hold"
POLICIES = (CANCEL, RUN, HOLD)
FAILED_STATES = (JobState.DEAD, JobState.CANCELLED)
#: The error a step cancelled by its policy carries: a retry of the failed dependency
#: restores exactly these steps (a person's cancel writes no error).
DEP_FAILED = "kathikon.DependencyFailed"
_CHUNK = 1000  # ids per IN (…): SQLite binds at most 32,766 parameters
_TOUCHED = (JobState.WAITING, JobState.HELD, JobState.CANCELLED)  # steps whose counters matter


@dataclass(frozen=True, slots=True)
class Member:
    """A step or a workflow that settled (``undo``: was settled and is not any more).

    ``failed``: it ended (or had ended, for ``undo``) dead, cancelled or failed.
    ``parent``: the workflow it counts in.
    """

    id: uuid.UUID
    parent: uuid.UUID | None
    failed: bool
    is_workflow: bool = False
    undo: bool = False


@dataclass(slots=True)
class Settled:
    """What one settle changed, for the signals sent after the commit."""

    released: dict[uuid.UUID, list[tuple[str, str]]] = field(
        default_factory=lambda: defaultdict(list))  # workflow → [(job id hex, step)]
    held: list[uuid.UUID] = field(default_factory=list)
    cancelled: list[uuid.UUID] = field(default_factory=list)
    finished: list[Workflow] = field(default_factory=list)
    queues: set[str] = field(default_factory=set)  # of the steps released into available

    def __bool__(self) -> bool:
        return bool(self.released or self.held or self.cancelled or self.finished)

    def merge(self, other: Settled) -> Settled:
        for workflow_id, steps in other.released.items():
            self.released[workflow_id].extend(steps)
        self.held += other.held
        self.cancelled += other.cancelled
        self.finished += other.finished
        self.queues |= other.queues
        return self


def step_members(jobs: Iterable[tuple[uuid.UUID, uuid.UUID | None, str]]) -> list[Member]:
    """Members for ``(job id, workflow id, final state)`` of steps that just settled."""
    return [Member(pk, workflow_id, state in FAILED_STATES)
            for pk, workflow_id, state in jobs if workflow_id is not None]


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
        following = _dependents(frontier, now, settled)
        following += _workflows(frontier, now, settled)
        frontier = following
    notify.notify(notify.AVAILABLE, settled.queues)
    return settled


# -- steps ----------------------------------------------------------------------------------


def _dependents(frontier: list[Member], now: dt.datetime, settled: Settled) -> list[Member]:
    """Add the frontier to the counters of the steps that wait on it; returns what settled."""
    if vendor.is_postgres():
        rows, counts = _count_postgres(frontier, now, settled)
        return _move(rows, counts, now, settled, counted=True)
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


# PostgreSQL: the edges, the new counters and the releases in one statement. The edges need
# no lock here: the settling transaction holds the settled step's row (it just wrote it),
# and an append locks that row before it adds an edge onto it, so the statement's snapshot,
# taken after that lock was had, holds every edge committed before. The waiting steps are
# found by primary key in ``c``'s order (sorted by id: the lock order); a join of ``c`` with
# another CTE instead is planned from ``c``'s estimate (one row) as a nested loop of scans,
# which for a fan-out of 10,000 took 20 s.
#
# Every SET reads the target row ``j`` itself, never a copy of it read by a CTE: a second
# transaction that waited for the row's lock re-reads the row as the first one left it,
# where a CTE's copy is the snapshot from before the wait (a lost update: a 10,000-wide
# fan-in whose counter never reached zero). A waiting step none of whose deps is left, and
# none failed (or its policy runs it anyway), is released by this UPDATE itself: one new
# row version per released step. The rarer moves (held, cancelled, restored) are decided
# in Python from the returned row.
_PG_COUNT = """
WITH m AS (SELECT * FROM unnest(%(ids)s::uuid[], %(failed)s::int[], %(sign)s::int[])
           AS m(id, failed, sign)),
c AS (
    SELECT e.job_id AS id, -sum(m.sign)::int AS dw, sum(m.sign * m.failed)::int AS df
    FROM ({edges}) AS e JOIN m ON e.dep = m.id
    GROUP BY e.job_id ORDER BY e.job_id)
UPDATE kathikon_job AS j
SET deps_waiting = GREATEST(0, j.deps_waiting + c.dw),
    deps_failed = GREATEST(0, j.deps_failed + c.df),
    state = CASE WHEN {released} THEN
                 CASE WHEN j.available_at > %(now)s THEN 'scheduled' ELSE 'available' END
            ELSE j.state END,
    available_at = CASE WHEN {released} AND j.available_at <= %(now)s THEN %(now)s
                   ELSE j.available_at END,
    unique_key = CASE WHEN NOT ({released}) THEN j.unique_key
                      WHEN j.available_at > %(now)s THEN {key_scheduled}
                      ELSE {key_available} END
FROM c
WHERE j.id = c.id AND j.state IN ('waiting', 'held', 'cancelled')
RETURNING j.id, j.state, j.deps_waiting, j.deps_failed, j.on_dep_failure, j.queue,
          j.workflow_id, j.step, j.errors, j.available_at, c.dw, c.df
"""
_PG_RELEASED = ("j.state = 'waiting' AND j.deps_waiting + c.dw <= 0 "
                "AND (j.deps_failed + c.df <= 0 OR j.on_dep_failure = 'run')")
_PG_EDGES_ON_JOBS = "SELECT job_id, dep_job_id AS dep FROM kathikon_workflowdep " \
    "WHERE dep_job_id = ANY(%(deps{index})s::uuid[])"
_PG_EDGES_ON_WORKFLOWS = "SELECT job_id, dep_workflow_id AS dep FROM kathikon_workflowdep " \
    "WHERE dep_workflow_id = ANY(%(deps{index})s::uuid[])"


def _count_postgres(frontier: list[Member], now: dt.datetime,
                    settled: Settled) -> tuple[list[dict[str, Any]], dict[uuid.UUID, list[int]]]:
    """Count and release (``_PG_COUNT``); releases go straight into ``settled``. Returns
    the other waiting steps' rows, with their new counters, and what was added to each."""
    jobs = [member.id for member in frontier if not member.is_workflow]
    workflows = [member.id for member in frontier if member.is_workflow]
    parts: list[str] = []
    params: list[list[uuid.UUID]] = []
    if jobs:
        parts.append(_PG_EDGES_ON_JOBS.format(index=len(params)))
        params.append(jobs)
    if workflows:
        parts.append(_PG_EDGES_ON_WORKFLOWS.format(index=len(params)))
        params.append(workflows)
    sql = _PG_COUNT.format(
        edges=" UNION ALL ".join(parts), released=_PG_RELEASED,
        key_scheduled=key_after_sql(JobState.SCHEDULED, "j"),
        key_available=key_after_sql(JobState.AVAILABLE, "j"))
    arguments: dict[str, Any] = {
        "ids": _array([m.id for m in frontier]),
        "failed": _array([int(m.failed) for m in frontier]),
        "sign": _array([-1 if m.undo else 1 for m in frontier]), "now": now}
    for index, ids in enumerate(params):
        arguments[f"deps{index}"] = _array(ids)
    with prepared.cursor() as cursor:
        cursor.execute(sql, arguments)
        found = cursor.fetchall()
    rows: list[dict[str, Any]] = []
    delta: dict[uuid.UUID, list[int]] = {}
    released = settled.released
    for values in found:
        state = values[1]
        if state in _RELEASED_INTO:  # only a release changes the state here (from waiting):
            # recorded at once, the common case of a fan-out of thousands
            released[values[6]].append((values[0].hex, values[7]))
            if state == JobState.AVAILABLE:
                settled.queues.add(values[5])
            continue
        row = dict(zip(_STEP_FIELDS, values[:len(_STEP_FIELDS)], strict=True))
        if isinstance(row["errors"], str):
            row["errors"] = json.loads(row["errors"])
        rows.append(row)
        delta[row["id"]] = [values[-2], values[-1]]
    return rows, delta


_RELEASED_INTO = frozenset({JobState.AVAILABLE, JobState.SCHEDULED})


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


_STEP_FIELDS = ("id", "state", "deps_waiting", "deps_failed", "on_dep_failure", "queue",
                "workflow_id", "step", "errors", "available_at")


def _lock_steps(ids: Sequence[uuid.UUID]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for chunk in _chunks(sorted(ids)):
        rows += list(_jobs().select_for_update().filter(id__in=chunk, state__in=_TOUCHED)
                     .order_by("id").values(*_STEP_FIELDS))
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


def _workflows(frontier: list[Member], now: dt.datetime, settled: Settled) -> list[Member]:
    """Count the frontier off (or back onto) its workflows; finish or reopen them."""
    delta: dict[uuid.UUID, list[int]] = defaultdict(lambda: [0, 0])
    for member in frontier:
        if member.parent is None:
            continue
        sign = -1 if member.undo else 1
        delta[member.parent][0] -= sign
        delta[member.parent][1] += sign * int(member.failed)
    if not delta:
        return []
    following: list[Member] = []
    counted = vendor.is_postgres()
    rows = _count_workflows(delta) if counted else _workflows_locked(sorted(delta))
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


# PostgreSQL: count in one statement (ids sorted: the lock order); the rows come back counted.
_PG_COUNT_WORKFLOWS = """
WITH v AS (SELECT * FROM unnest(%s::uuid[], %s::int[], %s::int[]) AS v(id, du, df))
UPDATE kathikon_workflow AS w
SET steps_unfinished = GREATEST(0, w.steps_unfinished + v.du),
    steps_failed = GREATEST(0, w.steps_failed + v.df)
FROM v
WHERE w.id = v.id
RETURNING {columns}
"""


def _count_workflows(delta: dict[uuid.UUID, list[int]]) -> list[Workflow]:
    fields = [f.attname for f in Workflow._meta.concrete_fields]
    sql = _PG_COUNT_WORKFLOWS.format(columns=", ".join(f"w.{name}" for name in fields))
    ids = sorted(delta)
    with prepared.cursor() as cursor:
        cursor.execute(sql, [_array(ids), _array([delta[pk][0] for pk in ids]),
                             _array([delta[pk][1] for pk in ids])])
        found = cursor.fetchall()
    using = vendor.alias()
    workflows = []
    for values in found:
        values = list(values)
        meta = fields.index("meta")
        if isinstance(values[meta], str):
            values[meta] = json.loads(values[meta])
        workflows.append(Workflow.from_db(using, fields, values))
    return sorted(workflows, key=lambda workflow: workflow.id)


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


def _array(values: Sequence[Any]) -> str:
    """An array literal (``'{…}'``) of uuids or ints: psycopg would dump a Python list
    element by element in Python; these need no quoting."""
    return "{" + ",".join(str(value) for value in values) + "}"


def _chunks(ids: Sequence[Any]) -> Iterable[list[Any]]:
    ids = list(ids)
    for start in range(0, len(ids), _CHUNK):
        yield ids[start:start + _CHUNK]


__all__ = ["CANCEL", "DEP_FAILED", "FAILED_STATES", "HOLD", "POLICIES", "RUN", "Member",
           "Settled", "dep_error", "evaluate", "settle", "step_members"]
