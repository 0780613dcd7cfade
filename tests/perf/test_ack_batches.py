"""One ack batch mixing every kind of outcome writes exactly what one-by-one acks write."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import kathikon
from kathikon.models import Job
from kathikon.states import JobState
from kathikon.storage import Ack, ack_jobs, claim_jobs
from tests import workers


@pytest.mark.django_db
def test_mixed_batch_is_fenced_and_written_per_kind():
    for i in range(6):
        kathikon.insert(workers.Succeed, {"i": i})
    jobs = sorted(claim_jobs("default", 6, "node-a"), key=lambda job: job.args["i"])
    stale = jobs[2]
    Job.objects.filter(id=stale.id).update(lease=stale.lease + 1)  # rescued and re-claimed
    acks = [
        Ack(jobs[0], JobState.COMPLETED),
        Ack(jobs[1], JobState.COMPLETED),
        Ack(stale, JobState.COMPLETED),                 # fenced off
        Ack(jobs[3], JobState.COMPLETED, result={"r": [1, 2]}),
        Ack(jobs[4], JobState.RETRYABLE, error={"attempt": 1, "kind": "x", "message": "m",
                                                  "at": "t", "traceback": ""}, delay=30),
        Ack(jobs[5], JobState.COMPLETED),
    ]
    written = ack_jobs(acks)
    assert written == {jobs[i].id for i in (0, 1, 3, 4, 5)}
    stored = {job.id: job for job in Job.objects.all()}
    for i in (0, 1, 5):
        assert stored[jobs[i].id].state == "completed"
        assert stored[jobs[i].id].result is None
        assert stored[jobs[i].id].completed_at is not None
        assert jobs[i].state == "completed"  # applied locally too
    assert stored[jobs[3].id].result == {"r": [1, 2]}
    assert stored[jobs[4].id].state == "retryable"
    assert stored[jobs[4].id].errors[0]["message"] == "m"
    assert stored[stale.id].state == "running" and stale.state == "running"


@pytest.mark.django_db
def test_completions_without_results_are_not_written_one_by_one():
    for i in range(20):
        kathikon.insert(workers.Succeed, {"i": i})
    jobs = claim_jobs("default", 20, "node-a")
    with CaptureQueriesContext(connection) as queries:
        written = ack_jobs([Ack(job, JobState.COMPLETED) for job in jobs])
    assert len(written) == 20
    updates = [q for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(
        "UPDATE")]
    assert len(updates) == 1
    assert Job.objects.filter(state="completed").count() == 20


@pytest.mark.django_db
def test_completions_with_results_are_written_a_chunk_a_statement():
    """1,200 results with quotes and non-ASCII text, one fenced off: three UPDATEs
    on MariaDB and SQLite (the completions, then two chunks of results), one on PostgreSQL."""
    from kathikon.storage.acks import RESULT_CHUNK

    kathikon.insert_many([(workers.Succeed, {"i": i}) for i in range(1_200)])
    jobs = sorted(claim_jobs("default", 1_200, "node-a"), key=lambda job: job.args["i"])
    stale = jobs[5]
    Job.objects.filter(id=stale.id).update(lease=stale.lease + 1)
    results = {job.id: {"i": job.args["i"], "text": f"naïve 'q' \"{job.args['i']}\""}
               for job in jobs}
    results[jobs[9].id] = None  # a completion without a result, in the same batch
    with CaptureQueriesContext(connection) as queries:
        written = ack_jobs([Ack(job, JobState.COMPLETED, result=results[job.id])
                            for job in jobs])
    assert written == {job.id for job in jobs} - {stale.id}
    updates = [q for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(
        "UPDATE")]
    expected = 1 if connection.vendor == "postgresql" else 1 + -(-1_198 // RESULT_CHUNK)
    assert len(updates) == expected
    stored = dict(Job.objects.values_list("id", "result"))
    assert all(stored[job.id] == results[job.id] for job in jobs if job is not stale)
    assert stored[stale.id] is None
    assert Job.objects.get(id=stale.id).state == "running"
    assert Job.objects.filter(state="completed").count() == 1_199
