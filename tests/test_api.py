"""cancel, fetch, all, retry, rerun, dead_jobs, status, history, claim, queues, schedule."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

import kathikon
from kathikon import signals, storage
from kathikon.executor import execute_job
from kathikon.models import Job, JobEvent, Queue
from tests import workers

pytestmark = pytest.mark.django_db


def run_one(queue: str = "default") -> Job:
    (job,) = storage.claim_jobs(queue, 1, "test-node")
    execute_job(job)
    return kathikon.fetch(job.id)


def test_fetch_and_missing_ids():
    job = kathikon.insert(workers.Succeed, {})
    assert kathikon.fetch(job.id.hex).id == job.id
    assert kathikon.fetch(str(job.id)).id == job.id
    with pytest.raises(kathikon.JobNotFound):
        kathikon.fetch("0" * 32)
    with pytest.raises(kathikon.JobNotFound):
        kathikon.fetch("not-an-id")


def test_all_returns_every_job_oldest_first():
    jobs = [kathikon.insert(workers.Succeed, {"i": i}) for i in range(3)]
    assert [job.id for job in kathikon.all()] == [job.id for job in jobs]


def test_cancel_pending_jobs():
    for options in ({}, {"schedule_in": 60}):
        job = kathikon.insert(workers.Succeed, {}, **options)
        cancelled = kathikon.cancel(job.id.hex)
        assert cancelled.state == "cancelled"
        stored = kathikon.fetch(job.id)
        assert stored.state == "cancelled"
        assert stored.cancelled_at is not None
        assert JobEvent.objects.filter(job_id=job.id, kind="cancelled").count() == 1


def test_cancel_refuses_executing_and_terminal_jobs():
    job = kathikon.insert(workers.Succeed, {})
    kathikon.claim(job.id)
    with pytest.raises(kathikon.JobExecuting):
        kathikon.cancel(job.id)
    done = kathikon.insert(workers.Succeed, {}, queue="other")
    run_one("other")
    with pytest.raises(kathikon.InvalidState) as info:
        kathikon.cancel(done.id)
    assert info.value.state == "completed"
    with pytest.raises(kathikon.JobNotFound):
        kathikon.cancel("f" * 32)
    assert kathikon.fetch(job.id).state == "claimed"


def test_cancel_sends_job_cancelled():
    seen = []
    signals.job_cancelled.connect(lambda sender, job, **kw: seen.append((sender, job.state)),
                                  weak=False, dispatch_uid="t")
    try:
        kathikon.cancel(kathikon.insert(workers.Succeed, {}).id)
    finally:
        signals.job_cancelled.disconnect(dispatch_uid="t")
    assert seen == [(workers.Succeed, "cancelled")]


def test_retry_puts_the_same_job_back_to_available():
    job = kathikon.insert(workers.Explode, {}, max_attempts=1)
    dead = run_one()
    assert dead.state == "dead"
    retried = kathikon.retry(job.id.hex)
    assert (retried.id, retried.state) == (job.id, "available")
    assert retried.max_attempts == 2  # one more attempt than used
    assert retried.completed_at is None
    assert JobEvent.objects.filter(job_id=job.id, kind="retried").count() == 1
    again = run_one()
    assert (again.state, again.attempts, len(again.errors)) == ("dead", 2, 2)


def test_retry_refuses_executing_and_available_jobs():
    job = kathikon.insert(workers.Succeed, {})
    with pytest.raises(kathikon.InvalidState):
        kathikon.retry(job.id)
    kathikon.claim(job.id)
    with pytest.raises(kathikon.JobExecuting):
        kathikon.retry(job.id)


def test_retry_runs_a_scheduled_job_now():
    job = kathikon.insert(workers.Succeed, {}, schedule_in=3600)
    assert kathikon.retry(job.id).state == "available"
    assert run_one().state == "completed"


def test_rerun_copies_a_terminal_job_into_a_new_one():
    job = kathikon.insert(workers.Succeed, {"x": 1}, queue="q2", priority=3)
    run_one("q2")
    copy = kathikon.rerun(job.id)
    assert copy.id != job.id
    assert (copy.worker, copy.args, copy.queue, copy.priority, copy.state) == (
        job.worker, {"x": 1}, "q2", 3, "available")
    assert copy.meta["rerun_of"] == job.id.hex
    assert kathikon.fetch(job.id).state == "completed"
    assert JobEvent.objects.get(job_id=job.id, kind="rerun").data["new_job"] == copy.id.hex
    pending = kathikon.insert(workers.Succeed, {})
    with pytest.raises(kathikon.InvalidState):
        kathikon.rerun(pending.id)


def test_dead_jobs_by_queue():
    kathikon.insert(workers.RaiseDiscard, {}, queue="a")
    kathikon.insert(workers.RaiseDiscard, {}, queue="b")
    kathikon.insert(workers.Succeed, {}, queue="a")
    run_one("a")
    run_one("a")
    run_one("b")
    assert {job.queue for job in kathikon.dead_jobs()} == {"a", "b"}
    assert [job.worker for job in kathikon.dead_jobs("a")] == ["tests.workers.RaiseDiscard"]


def test_status_is_a_plain_dict():
    job = kathikon.insert(workers.Succeed, {})
    run_one()
    status = kathikon.status(job.id.hex)
    assert status["state"] == "completed"
    assert status["attempts"] == 1
    assert status["id"] == job.id.hex
    assert status["errors"] == 0


def test_history_is_derived_for_a_successful_run_without_event_rows():
    job = kathikon.insert(workers.Succeed, {})
    run_one()
    assert JobEvent.objects.count() == 0
    events = [item["event"] for item in kathikon.history(job.id)]
    assert events == ["inserted", "started", "completed"]


def test_history_has_failures_and_stored_events_in_order():
    job = kathikon.insert(workers.Explode, {}, max_attempts=1)
    run_one()
    kathikon.retry(job.id)
    run_one()
    history = kathikon.history(job.id)
    kinds = [item["event"] for item in history]
    assert kinds.count("failed") == 2
    assert "retried" in kinds
    assert kinds[0] == "inserted"
    assert kinds[-1] == "dead"
    times = [item["at"] for item in history]
    assert times == sorted(times)


def test_claim_a_specific_job_and_claim_available():
    low = kathikon.insert(workers.Succeed, {}, priority=1)
    high = kathikon.insert(workers.Succeed, {}, priority=9)
    claimed = kathikon.claim_available("default")
    assert (claimed.id, claimed.state, claimed.attempts) == (high.id, "claimed", 1)
    job = kathikon.claim(low.id.hex, node="runner-1")
    assert (job.state, job.attempted_by) == ("claimed", "runner-1")
    assert kathikon.claim_available("default") is None
    with pytest.raises(kathikon.JobExecuting):
        kathikon.claim(low.id)
    scheduled = kathikon.insert(workers.Succeed, {}, schedule_in=60)
    with pytest.raises(kathikon.InvalidState) as info:
        kathikon.claim(scheduled.id)
    assert info.value.state == "scheduled"


def test_claimed_job_can_be_executed_by_an_external_runner():
    job = kathikon.insert(workers.Succeed, {"a": 1})
    claimed = kathikon.claim(job.id)
    execute_job(claimed)
    assert kathikon.fetch(job.id).result == {"echo": {"a": 1}}


def test_pause_resume_and_start_queue():
    kathikon.insert(workers.Succeed, {}, queue="imports")
    kathikon.pause_queue("imports")
    assert Queue.objects.get(name="imports").paused
    assert storage.claim_jobs("imports", 10, "n") == []
    assert kathikon.claim_available("imports") is None
    kathikon.resume_queue("imports")
    assert len(storage.claim_jobs("imports", 10, "n")) == 1
    kathikon.pause_queue("imports")
    queue = kathikon.start_queue("imports")
    assert not queue.paused
    assert kathikon.start_queue("brand-new").name == "brand-new"
    with pytest.raises(kathikon.InvalidQueue):
        kathikon.pause_queue("no spaces allowed")


def test_queue_signals_fire_on_change_only():
    seen = []
    for signal in (signals.queue_paused, signals.queue_resumed):
        signal.connect(lambda sender, queue, signal, **kw: seen.append((signal, queue)),
                       weak=False, dispatch_uid="q")
    try:
        kathikon.pause_queue("x")
        kathikon.pause_queue("x")
        kathikon.resume_queue("x")
    finally:
        for signal in (signals.queue_paused, signals.queue_resumed):
            signal.disconnect(dispatch_uid="q")
    assert seen == [(signals.queue_paused, "x"), (signals.queue_resumed, "x")]


def test_schedule_one_time():
    job_id = kathikon.schedule(workers.Succeed, {}, in_seconds=120)
    job = kathikon.fetch(job_id)
    assert job.state == "scheduled"
    at = timezone.now() + dt.timedelta(days=1)
    assert kathikon.fetch(kathikon.schedule(workers.Succeed, {}, at=at)).available_at == at
    with pytest.raises(kathikon.InvalidJob):
        kathikon.schedule(workers.Succeed, {})
    with pytest.raises(kathikon.InvalidJob):
        kathikon.schedule(workers.Succeed, {}, at=at, in_seconds=5)
    with pytest.raises(kathikon.InvalidJob):
        kathikon.schedule(workers.Succeed, {}, in_seconds=-1)
    with pytest.raises(kathikon.InvalidJob):
        kathikon.schedule(workers.Succeed, {}, at=dt.datetime(2030, 1, 1))


def test_promote_scheduled_makes_due_jobs_available():
    due = kathikon.insert(workers.Succeed, {}, schedule_in=10)
    later = kathikon.insert(workers.Succeed, {}, schedule_in=3600)
    assert storage.promote_scheduled(timezone.now() + dt.timedelta(seconds=11)) == 1
    assert kathikon.fetch(due.id).state == "available"
    assert kathikon.fetch(later.id).state == "scheduled"


def test_prune_deletes_old_terminal_jobs_only():
    old = kathikon.insert(workers.Succeed, {})
    pending = kathikon.insert(workers.Succeed, {}, schedule_in=10)
    run_one()
    cutoff = timezone.now() + dt.timedelta(seconds=1)
    assert storage.prune_jobs(cutoff, limit=10) == 1
    with pytest.raises(kathikon.JobNotFound):
        kathikon.fetch(old.id)
    assert kathikon.fetch(pending.id).state == "scheduled"
