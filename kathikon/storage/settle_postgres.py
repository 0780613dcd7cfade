"""Internal: settling workflow steps on PostgreSQL — one statement per round of the settle.

The portable algorithm is kathikon.storage.settle's; here its hot part (add the
settled deps to the waiting steps' counters and release those with none left; count
the settled steps off their workflows) is one prepared statement: an ack batch of
workflow steps costs one round trip more than a plain job's, not three.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import uuid
from typing import Any

from kathikon.models import Workflow
from kathikon.states import JobState
from kathikon.storage import prepared, vendor
from kathikon.storage.fragments import state_in_by_key
from kathikon.storage.literals import int_array, uuid_array
from kathikon.storage.partitions import on_live
from kathikon.storage.settled import TOUCHED_STATES, Member, Settled
from kathikon.storage.uniques import key_after_sql

STEP_FIELDS = ("id", "state", "deps_waiting", "deps_failed", "on_dep_failure", "queue",
               "workflow_id", "step", "errors", "available_at")


# PostgreSQL: the edges, the new counters and the releases in one statement. The edges need
# no lock here: the settling transaction holds the settled step's row (it just wrote it),
# and an append locks that row before it adds an edge onto it, so the statement's snapshot,
# taken after that lock was had, holds every edge committed before.
#
# The plan is fixed by the statement's shape, not left to estimates, which are wrong both
# ways here (a fan-out of 10,000 is estimated at one or two edges, an ack batch of 300
# settled steps with one dependent among them at 200 waiting steps; on a small table the
# latter was planned as two sequential scans, 3.4 ms a batch instead of 0.4):
# - each settled step's edges are one probe of its index (``LATERAL … OFFSET 0``: not
#   flattened into a join the planner could hash);
# - the waiting steps' ids and counts are gathered into arrays (``c``: one row, which the
#   planner knows) and unnested again: an unnest of arrays it cannot see is estimated at
#   ten rows, so each waiting step is found by its primary key, in id order (the lock
#   order). A join of ``c`` with another CTE instead is planned from its estimate as a
#   nested loop of scans, which for a fan-out of 10,000 took 20 s;
# - the waiting steps' state test is one no index serves (``fragments.state_in_by_key``):
#   with a plain ``j.state IN`` and statistics from an ANALYZE that saw no waiting step
#   (a site's first workflow, or a table analyzed while only plain jobs waited), the
#   planner expects one waiting row, reads the waiting steps by ``kathikon_job_queue_state``
#   and unnests the whole array again for each of them: 141 s for a fan-out of 10,000,
#   an ack that never commits (the acker's watchdog restarts the worker, the rescued
#   step's ack does the same again).
#
# Every SET reads the target row ``j`` itself, never a copy of it read by a CTE: a second
# transaction that waited for the row's lock re-reads the row as the first one left it,
# where a CTE's copy is the snapshot from before the wait (a lost update: a 10,000-wide
# fan-in whose counter never reached zero). A waiting step none of whose deps is left, and
# none failed (or its policy runs it anyway), is released by this UPDATE itself: one new
# row version per released step. The rarer moves (held, cancelled, restored) are decided
# in Python from the returned rows. The released steps come back as one row per workflow
# (their ids as one string, their names and queues as arrays): a fan-out of 10,000 as
# 10,000 rows took 25 ms of the acker's Python to parse, during which nothing else ran.
#
# The settled steps are then counted off their workflows (``w``), locked after the job rows:
# ``w`` reads ``u`` whole first, so every job row is locked before any workflow row (the
# lock order). Its rows come back counted; finishing a workflow is decided in Python.
_PG_COUNT = """
WITH m AS (SELECT * FROM unnest(%(ids)s::uuid[], %(failed)s::int[], %(sign)s::int[])
           AS m(id, failed, sign)),
c AS (
    SELECT array_agg(g.id ORDER BY g.id) AS ids, array_agg(g.dw ORDER BY g.id) AS dw,
           array_agg(g.df ORDER BY g.id) AS df
    FROM (SELECT e.job_id AS id, -sum(m.sign)::int AS dw, sum(m.sign * m.failed)::int AS df
          FROM m CROSS JOIN LATERAL ({edges} OFFSET 0) AS e
          GROUP BY e.job_id) AS g),
u AS (
    UPDATE kathikon_job AS j
    SET deps_waiting = GREATEST(0, j.deps_waiting + s.dw),
        deps_failed = GREATEST(0, j.deps_failed + s.df),
        state = CASE WHEN {released} THEN
                     CASE WHEN j.available_at > %(now)s THEN 'scheduled' ELSE 'available' END
                ELSE j.state END,
        available_at = CASE WHEN {released} AND j.available_at <= %(now)s THEN %(now)s
                       ELSE j.available_at END,
        unique_key = CASE WHEN NOT ({released}) THEN j.unique_key
                          WHEN j.available_at > %(now)s THEN {key_scheduled}
                          ELSE {key_available} END
    FROM c CROSS JOIN LATERAL unnest(c.ids, c.dw, c.df) AS s(id, dw, df)
    WHERE j.id = s.id AND {touched} /*live:j*/
    RETURNING j.id, j.state, j.deps_waiting, j.deps_failed, j.on_dep_failure, j.queue,
              j.workflow_id, j.step, j.errors, j.available_at, s.dw, s.df),
v AS (SELECT * FROM unnest(%(workflows)s::uuid[], %(unfinished)s::int[],
                          %(workflows_failed)s::int[]) AS v(id, du, df)),
w AS (
    UPDATE kathikon_workflow AS w
    SET steps_unfinished = GREATEST(0, w.steps_unfinished + v.du),
        steps_failed = GREATEST(0, w.steps_failed + v.df)
    FROM v
    WHERE w.id = v.id AND (SELECT count(*) FROM u) >= 0
    RETURNING {workflow_columns})
SELECT 's', id, state, deps_waiting, deps_failed, on_dep_failure, queue, workflow_id, step,
       errors, available_at, dw, df, NULL, NULL, NULL, {workflow_nulls}
FROM u WHERE state NOT IN ('available', 'scheduled')
UNION ALL
SELECT 'r', NULL, NULL, NULL, NULL, NULL, NULL, workflow_id, NULL, NULL, NULL, NULL, NULL,
       string_agg(replace(id::text, '-', ''), ',' ORDER BY id), array_agg(step ORDER BY id),
       array_agg(DISTINCT queue) FILTER (WHERE state = 'available'), {workflow_nulls}
FROM u WHERE state IN ('available', 'scheduled')
GROUP BY workflow_id
UNION ALL
SELECT 'w', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, {workflow_columns_out}
FROM w
"""
_PG_RELEASED = ("j.state = 'waiting' AND j.deps_waiting + s.dw <= 0 "
                "AND (j.deps_failed + s.df <= 0 OR j.on_dep_failure = 'run')")
# A settled step's edges, or a settled workflow's (ids never clash: both are UUIDv7s)
_PG_EDGES_ON_JOBS = "SELECT job_id FROM kathikon_workflowdep WHERE dep_job_id = m.id"
_PG_EDGES_ON_WORKFLOWS = "SELECT job_id FROM kathikon_workflowdep WHERE dep_workflow_id = m.id"


def count(frontier: list[Member], workflows: dict[uuid.UUID, list[int]], now: dt.datetime,
          settled: Settled) -> tuple[list[dict[str, Any]], dict[uuid.UUID, list[int]],
                                     list[Workflow]]:
    """Count ``frontier`` onto its dependents and ``workflows`` (``{id: [unfinished delta,
    failed delta]}``) onto their rows (``_PG_COUNT``); releases go straight into
    ``settled``. Returns the other waiting steps' rows with their new counters, what was
    added to each, and the workflow rows with theirs (in id order)."""
    parts = []
    if any(not member.is_workflow for member in frontier):
        parts.append(_PG_EDGES_ON_JOBS)
    if any(member.is_workflow for member in frontier):
        parts.append(_PG_EDGES_ON_WORKFLOWS)
    sql = on_live(_formatted(" UNION ALL ".join(parts)))
    ids = sorted(workflows)
    arguments: dict[str, Any] = {
        "ids": uuid_array([m.id for m in frontier]),
        "failed": int_array([int(m.failed) for m in frontier]),
        "sign": int_array([-1 if m.undo else 1 for m in frontier]), "now": now,
        "workflows": uuid_array(ids), "unfinished": int_array([workflows[pk][0] for pk in ids]),
        "workflows_failed": int_array([workflows[pk][1] for pk in ids])}
    with prepared.cursor() as cursor:
        cursor.execute(sql, arguments)
        found = cursor.fetchall()
    rows: list[dict[str, Any]] = []
    delta: dict[uuid.UUID, list[int]] = {}
    counted: list[Workflow] = []
    released = settled.released
    using = vendor.alias()
    for values in found:
        kind = values[0]
        if kind == "r":  # the steps of one workflow this statement released
            ids, steps, queues = values[_AT_RELEASED:_AT_WORKFLOW]
            released[values[_AT_WORKFLOW_ID]].extend(zip(ids.split(","), steps, strict=True))
            settled.queues.update(queues or ())
        elif kind == "s":
            row = dict(zip(STEP_FIELDS, values[1:_AT_ADDED], strict=True))
            if isinstance(row["errors"], str):
                row["errors"] = json.loads(row["errors"])
            rows.append(row)
            delta[row["id"]] = list(values[_AT_ADDED:_AT_RELEASED])
        else:
            fields = list(values[_AT_WORKFLOW:])
            if isinstance(fields[_META], str):
                fields[_META] = json.loads(fields[_META])
            counted.append(Workflow.from_db(using, _WORKFLOW_FIELDS, fields))
    return rows, delta, sorted(counted, key=lambda workflow: workflow.id)


_WORKFLOW_FIELDS = [f.attname for f in Workflow._meta.concrete_fields]
_META = _WORKFLOW_FIELDS.index("meta")
# Where each part of a ``_PG_COUNT`` row starts: the kind, a step's fields, what was added
# to its counters (dw, df), the released steps of one workflow (ids, names, queues), a
# workflow's fields.
_AT_ADDED = 1 + len(STEP_FIELDS)
_AT_RELEASED = _AT_ADDED + 2
_AT_WORKFLOW = _AT_RELEASED + 3
_AT_WORKFLOW_ID = 1 + STEP_FIELDS.index("workflow_id")


@functools.cache
def _formatted(edges: str) -> str:
    """``_PG_COUNT`` for these edges, written once (psycopg prepares each text once)."""
    return _PG_COUNT.format(
        edges=edges, released=_PG_RELEASED, touched=state_in_by_key("j", TOUCHED_STATES),
        key_scheduled=key_after_sql(JobState.SCHEDULED, "j"),
        key_available=key_after_sql(JobState.AVAILABLE, "j"),
        workflow_columns=", ".join(f"w.{name}" for name in _WORKFLOW_FIELDS),
        workflow_columns_out=", ".join(_WORKFLOW_FIELDS),
        # typed: a column NULL in the first two branches would be text in the third
        workflow_nulls=", ".join(f"(NULL::kathikon_workflow).{name}"
                                 for name in _WORKFLOW_FIELDS))


__all__ = ["STEP_FIELDS", "count"]
