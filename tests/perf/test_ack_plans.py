"""PostgreSQL finds each acked job by its primary key, however many jobs are executing.

The last ANALYZE usually ran while nothing executed (a deploy's migration, a backlog
just inserted), so kathikon_job_executing looks empty to the planner; an ack that
could use it hashed every executing job of every node for each batch.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import kathikon
from kathikon.models import Job
from kathikon.states import JobState
from kathikon.storage import Ack, ack_jobs, claim_jobs
from tests import workers


def _explain(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.django_db
@pytest.mark.parametrize("result", [None, {"r": 1}])
def test_ack_probes_the_primary_key_among_many_executing_jobs(postgres_only, result):
    # Big enough that 50 probes cost the planner less than reading the whole table.
    kathikon.insert_many([(workers.Succeed, {"i": i}) for i in range(8000)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE kathikon_job")  # nothing executes yet
    claim_jobs("default", 3000, "node-a")
    mine = claim_jobs("default", 3000, "node-b")[:50]

    with CaptureQueriesContext(connection) as queries:
        written = ack_jobs([Ack(job, JobState.COMPLETED, result=result) for job in mine])

    assert written == {job.id for job in mine}
    assert Job.objects.filter(state="completed").count() == 50
    assert Job.objects.filter(state="running").count() == 5950
    [update] = [query["sql"] for query in queries.captured_queries
                if query["sql"].lstrip().startswith("UPDATE")]
    plan = _explain(update)
    assert "kathikon_job_pkey" in plan, plan
    assert "kathikon_job_executing" not in plan, plan
