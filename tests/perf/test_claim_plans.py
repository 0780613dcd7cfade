"""The claim walks its index in order, also after ANALYZE (SQLite's planner then prefers a
skip-scan plus a sort over every due row, which made claims O(backlog))."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone

import kathikon
from kathikon.storage.claims import _SQLITE_CLAIMS
from tests import workers


@pytest.mark.django_db
def test_sqlite_claim_plan_after_analyze(vendor):
    if vendor != "sqlite":
        pytest.skip("SQLite's query planner; PostgreSQL's plan is checked by `make bench`")
    kathikon.insert_many([(workers.Succeed, {"i": i}) for i in range(2000)])
    stamp = connection.ops.adapt_datetimefield_value(timezone.now())
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
        cursor.execute("EXPLAIN QUERY PLAN " + _SQLITE_CLAIMS["running"],
                       ["running", stamp, "n", "default", stamp, "default", 10])
        plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
    assert "kathikon_job_claim" in plan
    assert "TEMP B-TREE" not in plan, plan


def _rows_read(cursor) -> int:
    cursor.execute("SHOW SESSION STATUS WHERE Variable_name IN ('Handler_read_next', "
                   "'Handler_read_prev', 'Handler_read_rnd_next', 'Handler_read_key')")
    return sum(int(value) for _, value in cursor.fetchall())


@pytest.mark.django_db
def test_mariadb_claim_never_walks_finished_jobs(vendor):
    """Without partial indexes the claim scans each claimable state's own index range.

    2,000 completed jobs sit before the 5 available ones in (queue, priority,
    available_at) order; the claim must read about the rows it returns, not the
    finished ones (the old plain index made every claim read the whole table).
    """
    if vendor != "mysql":
        pytest.skip("MariaDB/MySQL index fallback; PostgreSQL and SQLite use a partial index")
    from kathikon import storage
    from kathikon.models import Job

    kathikon.insert_many([(workers.Succeed, {"i": i}) for i in range(2000)])
    Job.objects.update(state="completed", completed_at=timezone.now())
    fresh = [kathikon.insert(workers.Succeed, {"i": i}).id for i in range(5)]
    with connection.cursor() as cursor:
        before = _rows_read(cursor)
        claimed = storage.claim_jobs("default", 3, "n1")
        read = _rows_read(cursor) - before
    assert [job.id for job in claimed] == fresh[:3]
    assert read < 50, f"the claim read {read} rows for 3 jobs"
