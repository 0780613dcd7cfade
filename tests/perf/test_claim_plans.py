"""The claim walks its index in order, also after ANALYZE (SQLite's planner then prefers a
skip-scan plus a sort over every due row, which made claims O(backlog))."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone

import kathikon
from kathikon.storage.claims import _SQLITE_CLAIM
from tests import workers


@pytest.mark.django_db
def test_sqlite_claim_plan_after_analyze(vendor):
    if vendor != "sqlite":
        pytest.skip("SQLite's query planner; PostgreSQL's plan is checked by `make bench`")
    kathikon.insert_many([(workers.Succeed, {"i": i}) for i in range(2000)])
    stamp = connection.ops.adapt_datetimefield_value(timezone.now())
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
        cursor.execute("EXPLAIN QUERY PLAN " + _SQLITE_CLAIM,
                       ["running", stamp, "n", "default", stamp, "default", 10])
        plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
    assert "kathikon_job_claim" in plan
    assert "TEMP B-TREE" not in plan, plan
