"""Internal: settling workflow steps on PostgreSQL — counts and releases in single statements.

The portable algorithm is kathikon.storage.settle's; here its two hot steps (add
the settled deps to the waiting steps' counters and release those with none left;
count the settled steps off their workflows) are one prepared statement each.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Sequence
from typing import Any

from kathikon.models import Workflow
from kathikon.states import JobState
from kathikon.storage import prepared, vendor
from kathikon.storage.partitions import on_live
from kathikon.storage.settled import Member, Settled
from kathikon.storage.uniques import key_after_sql

STEP_FIELDS = ("id", "state", "deps_waiting", "deps_failed", "on_dep_failure", "queue",
               "workflow_id", "step", "errors", "available_at")


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
# in Python from the returned row; a released row comes back without its errors and
# available_at, which only those need (a fan-out of 10,000 parsed 10,000 of each).
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
WHERE j.id = c.id AND j.state IN ('waiting', 'held', 'cancelled') /*live:j*/
RETURNING j.id, j.state, j.deps_waiting, j.deps_failed, j.on_dep_failure, j.queue,
          j.workflow_id, j.step,
          CASE WHEN j.state IN ('available', 'scheduled') THEN NULL ELSE j.errors END,
          CASE WHEN j.state IN ('available', 'scheduled') THEN NULL ELSE j.available_at END,
          c.dw, c.df
"""
_PG_RELEASED = ("j.state = 'waiting' AND j.deps_waiting + c.dw <= 0 "
                "AND (j.deps_failed + c.df <= 0 OR j.on_dep_failure = 'run')")
_PG_EDGES_ON_JOBS = "SELECT job_id, dep_job_id AS dep FROM kathikon_workflowdep " \
    "WHERE dep_job_id = ANY(%(deps{index})s::uuid[])"
_PG_EDGES_ON_WORKFLOWS = "SELECT job_id, dep_workflow_id AS dep FROM kathikon_workflowdep " \
    "WHERE dep_workflow_id = ANY(%(deps{index})s::uuid[])"


def count_steps(frontier: list[Member], now: dt.datetime,
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
    sql = on_live(_PG_COUNT.format(
        edges=" UNION ALL ".join(parts), released=_PG_RELEASED,
        key_scheduled=key_after_sql(JobState.SCHEDULED, "j"),
        key_available=key_after_sql(JobState.AVAILABLE, "j")))
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
        row = dict(zip(STEP_FIELDS, values[:len(STEP_FIELDS)], strict=True))
        if isinstance(row["errors"], str):
            row["errors"] = json.loads(row["errors"])
        rows.append(row)
        delta[row["id"]] = [values[-2], values[-1]]
    return rows, delta


_RELEASED_INTO = frozenset({JobState.AVAILABLE, JobState.SCHEDULED})


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


def count_workflows(delta: dict[uuid.UUID, list[int]]) -> list[Workflow]:
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


def _array(values: Sequence[Any]) -> str:
    """An array literal (``'{…}'``) of uuids (as 32 hex digits, which PostgreSQL reads)
    or ints: psycopg would dump a Python list element by element in Python; these need
    no quoting."""
    return "{" + ",".join(value.hex if isinstance(value, uuid.UUID) else str(value)
                          for value in values) + "}"


__all__ = ["STEP_FIELDS", "count_steps", "count_workflows"]
