"""storage.claim_jobs: order, limits, pause, and no double claims across connections."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import kathikon
from kathikon import storage
from kathikon.models import Job
from tests import workers
from tests.concurrency import run_at_once


@pytest.mark.django_db
def test_claims_best_priority_then_oldest_and_respects_the_limit():
    low = kathikon.insert(workers.Succeed, {}, priority=-5)
    first = kathikon.insert(workers.Succeed, {})
    second = kathikon.insert(workers.Succeed, {})
    high = kathikon.insert(workers.Succeed, {}, priority=50)
    claimed = storage.claim_jobs("default", 3, "n1")
    assert [job.id for job in claimed] == [high.id, first.id, second.id]
    assert all(job.state == "running" and job.attempts == 1 and job.lease == 1
               and job.attempted_by == "n1" for job in claimed)
    assert [job.id for job in storage.claim_jobs("default", 3, "n1")] == [low.id]
    assert storage.claim_jobs("default", 3, "n1") == []


@pytest.mark.django_db
def test_claimed_rows_match_what_claim_returned():
    kathikon.insert(workers.Succeed, {"k": "v"})
    (job,) = storage.claim_jobs("default", 5, "n1")
    stored = Job.objects.get(id=job.id)
    for field in ("state", "attempts", "lease", "attempted_by", "args", "queue", "worker",
                  "max_attempts", "errors", "meta"):
        assert getattr(stored, field) == getattr(job, field), field
    assert abs((stored.started_at - job.started_at).total_seconds()) < 1


@pytest.mark.django_db
def test_never_claims_scheduled_future_retryable_or_other_queues():
    kathikon.insert(workers.Succeed, {}, schedule_in=60)
    kathikon.insert(workers.Succeed, {}, queue="other")
    retry_later = kathikon.insert(workers.Succeed, {})
    Job.objects.filter(id=retry_later.id).update(
        state="retryable", available_at=timezone.now() + dt.timedelta(minutes=5))
    assert storage.claim_jobs("default", 10, "n1") == []
    Job.objects.filter(id=retry_later.id).update(available_at=timezone.now())
    assert [job.id for job in storage.claim_jobs("default", 10, "n1")] == [retry_later.id]


@pytest.mark.django_db
def test_claim_with_an_injected_clock():
    job = kathikon.insert(workers.Succeed, {}, schedule_in=30)
    Job.objects.filter(id=job.id).update(state="available")
    assert storage.claim_jobs("default", 1, "n", now=timezone.now()) == []
    later = timezone.now() + dt.timedelta(seconds=31)
    assert [j.id for j in storage.claim_jobs("default", 1, "n", now=later)] == [job.id]


@pytest.mark.django_db
def test_claim_and_batch_ack_cost_a_fixed_number_of_statements(vendor):
    from kathikon.executor import run_job, settle

    kathikon.insert_many([(workers.ReturnsNothing, {"i": i}) for i in range(50)])
    with CaptureQueriesContext(connection) as claim_queries:
        jobs = storage.claim_jobs("default", 50, "n1")
    assert len(jobs) == 50
    with CaptureQueriesContext(connection) as ack_queries:
        settle([run_job(job) for job in jobs])
    if vendor == "postgresql":
        assert len(claim_queries) == 1
        # one UPDATE for the whole batch (plus SAVEPOINT/RELEASE inside the test transaction)
        updates = [q for q in ack_queries.captured_queries if "UPDATE" in q["sql"]]
        assert len(updates) == 1
    else:
        # pause check, savepoint, SELECT … FOR UPDATE, UPDATE, release
        assert len(claim_queries) <= 5
    assert Job.objects.filter(state="completed").count() == 50


@pytest.mark.django_db(transaction=True)
def test_concurrent_claims_never_take_a_job_twice(concurrent_db):
    total = 600
    kathikon.insert_many([(workers.ReturnsNothing, {"i": i}) for i in range(total)])
    claimed: list[list] = [[] for _ in range(6)]

    def claimer(slot: int) -> None:
        while True:
            jobs = storage.claim_jobs("default", 7, f"node-{slot}")
            if not jobs:
                break
            claimed[slot].extend(job.id for job in jobs)

    run_at_once(claimer, 6)
    every = [job_id for ids in claimed for job_id in ids]
    assert len(every) == total
    assert len(set(every)) == total
    assert sum(1 for ids in claimed if ids) >= 2  # the work really was shared
    assert Job.objects.filter(state="running", lease=1, attempts=1).count() == total
