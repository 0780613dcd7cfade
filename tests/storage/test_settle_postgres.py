"""kathikon.storage.settle_postgres: the settling statement's plan does not follow the
statistics into a quadratic join.

An ANALYZE that saw no waiting step (a site's first workflow, or any moment when only
plain jobs waited) tells the planner that ``state = 'waiting'`` matches one row. Given
``j.state IN ('waiting', …)`` it then read the waiting steps by their state index and
unnested the whole array of released ids again for each one: 9.8 s for a fan-out of 3,000,
141 s for 10,000, an ack that never commits. The test's ANALYZE runs inside its
transaction, so the statistics it writes are rolled back with it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import kathikon
from kathikon.models import Job
from kathikon.storage.settle import settle, step_members
from tests.workers import Succeed

pytestmark = pytest.mark.django_db
WIDTH = 1500


def _indexes_reading_j(plan: dict[str, Any]) -> list[str]:
    """How ``plan`` reads the job table (or its live partition) as ``j``: the index of each
    index scan, the indexes under each bitmap heap scan, ``"seq"`` for a sequential scan."""
    found: list[str] = []
    if (plan.get("Relation Name", "").startswith("kathikon_job")
            and plan.get("Alias", "").startswith("j") and plan["Node Type"].endswith("Scan")):
        if plan["Node Type"] == "Bitmap Heap Scan":
            found += _bitmap_indexes(plan)
        else:
            found.append(plan.get("Index Name", "seq"))
    for child in plan.get("Plans", []):
        found += _indexes_reading_j(child)
    return found


def _bitmap_indexes(plan: dict[str, Any]) -> list[str]:
    names = [plan["Index Name"]] if plan["Node Type"] == "Bitmap Index Scan" else []
    for child in plan.get("Plans", []):
        names += _bitmap_indexes(child)
    return names


def test_a_fan_out_is_released_by_primary_key_whatever_the_statistics_say(postgres_only):
    kathikon.insert_many([(Succeed, {"i": i}) for i in range(300)])
    with connection.cursor() as cursor:  # statistics in which no job is waiting
        cursor.execute("ANALYZE kathikon_job")
    Job.objects.all().delete()
    wf = kathikon.Workflow("stale-statistics")
    wf.add("root", Succeed, {})
    middle = [wf.add(f"s{i}", Succeed, {}, deps=["root"]) for i in range(WIDTH)]
    wf.add("end", Succeed, {}, deps=middle)
    wf.insert()
    root = Job.objects.get(workflow_id=wf.id, step="root")
    Job.objects.filter(pk=root.pk).update(state="completed", completed_at=root.inserted_at)

    with CaptureQueriesContext(connection) as queries:  # plain statements, with their values
        settled = settle(step_members([(root.id, wf.id, "completed")]))

    assert sum(len(steps) for steps in settled.released.values()) == WIDTH
    assert Job.objects.filter(workflow_id=wf.id, state="available").count() == WIDTH
    [statement] = [q["sql"] for q in queries.captured_queries
                   if q["sql"].lstrip().startswith("WITH m AS")]
    with connection.cursor() as cursor:  # the plan only: EXPLAIN without ANALYZE writes nothing
        cursor.execute("EXPLAIN (FORMAT JSON) " + statement)
        plan = cursor.fetchone()[0]
        cursor.execute("EXPLAIN " + statement)
        text = "\n".join(row[0] for row in cursor.fetchall())
    plan = json.loads(plan) if isinstance(plan, str) else plan
    # by an index scan or a bitmap of kathikon_job_pkey (the live partition's own when the
    # table is partitioned), never by another index or the whole table
    readers = _indexes_reading_j(plan[0]["Plan"])
    assert readers, f"the statement reads no waiting step:\n{text}"
    assert set(readers) <= {"kathikon_job_pkey", "kathikon_job_live_pkey"}, text
