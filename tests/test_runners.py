"""External runners: complete, fail, discard and snooze a claimed job, fenced by its lease."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pytest
from django.utils import timezone

import kathikon
from kathikon import signals, storage
from kathikon.models import Job
from tests import workers

pytestmark = pytest.mark.django_db


@pytest.fixture
def claimed(insert_job: Any) -> Any:
    """``claimed(worker=Succeed, args={}, **options)``: insert a job and claim it by id."""

    def make(worker: Any = workers.Succeed, args: dict[str, Any] | None = None,
             **options: Any) -> Job:
        job = insert_job(worker, args or {}, **options)
        return kathikon.claim(job.id, node="runner-1")

    return make


def _rescue_everything() -> None:
    """What the lifeline does once an external claim is older than RESCUE_AFTER."""
    rescued = storage.rescue_jobs(timezone.now() + dt.timedelta(hours=1))
    assert rescued


def test_complete_stores_the_result_and_sends_job_completed(claimed):
    seen = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        seen.append((sender, kwargs["job"].id, kwargs["result"]))

    signals.job_completed.connect(receiver)
    try:
        job = claimed()
        done = kathikon.complete(job, {"frames": 24})
    finally:
        signals.job_completed.disconnect(receiver)
    stored = kathikon.fetch(job.id)
    assert (done.state, stored.state, stored.result) == ("completed", "completed",
                                                         {"frames": 24})
    assert stored.completed_at is not None and stored.attempted_by == "runner-1"
    assert seen == [(workers.Succeed, job.id, {"frames": 24})]


def test_complete_a_job_from_claim_available(insert_job):
    insert_job(workers.Succeed, {"n": 1}, queue="video")
    job = kathikon.claim_available("video", node="transcoder")
    assert job is not None and job.state == "claimed"
    kathikon.complete(job)
    stored = kathikon.fetch(job.id)
    assert (stored.state, stored.result) == ("completed", None)


def test_fail_retries_with_backoff_then_dies_at_max_attempts(claimed):
    job = claimed(max_attempts=2)
    kathikon.fail(job, "transcoder busy")
    stored = kathikon.fetch(job.id)
    assert stored.state == "retryable"
    assert stored.available_at > timezone.now()
    assert [(e["attempt"], e["message"]) for e in stored.errors] == [(1, "transcoder busy")]

    Job.objects.filter(id=job.id).update(available_at=timezone.now())
    again = kathikon.claim(job.id)
    kathikon.fail(again, RuntimeError("still busy"))
    stored = kathikon.fetch(job.id)
    assert (stored.state, stored.attempts) == ("dead", 2)
    assert stored.errors[-1]["kind"] == "builtins.RuntimeError"
    assert stored.errors[-1]["message"] == "still busy"


def test_fail_with_retry_in_sets_the_next_attempt(claimed):
    job = claimed()
    before = timezone.now()
    kathikon.fail(job, ValueError("rate limited"), retry_in=120)
    stored = kathikon.fetch(job.id)
    assert stored.state == "retryable"
    assert 115 <= (stored.available_at - before).total_seconds() <= 125
    assert stored.errors[-1]["message"] == "rate limited"


def test_error_text_the_database_cannot_store_is_replaced_not_refused(claimed):
    job = claimed()
    kathikon.fail(job, RuntimeError("tool said a\x00b \ud800"))
    stored = kathikon.fetch(job.id)
    assert stored.state == "retryable"
    assert stored.errors[-1]["message"] == "tool said a\ufffdb \ufffd"


def test_discard_makes_the_job_dead_with_the_reason(claimed):
    job = claimed(max_attempts=10)
    kathikon.discard(job, "corrupt input file")
    stored = kathikon.fetch(job.id)
    assert (stored.state, stored.errors[-1]["message"]) == ("dead", "corrupt input file")


def test_snooze_schedules_the_job_and_gives_the_attempt_back(claimed):
    job = claimed()
    kathikon.snooze(job, 90)
    stored = kathikon.fetch(job.id)
    assert (stored.state, stored.attempts) == ("scheduled", 0)
    assert 85 <= (stored.available_at - timezone.now()).total_seconds() <= 95


def test_a_rescued_job_refuses_the_late_outcome_and_says_so(claimed):
    job = claimed()
    _rescue_everything()
    rescued = kathikon.fetch(job.id)
    assert rescued.state in ("available", "retryable")
    for finish in (lambda: kathikon.complete(job, {"late": True}),
                   lambda: kathikon.fail(job, "late"),
                   lambda: kathikon.discard(job, "late"),
                   lambda: kathikon.snooze(job, 5)):
        with pytest.raises(kathikon.StaleLease, match="nothing was written"):
            finish()
    after = kathikon.fetch(job.id)
    assert (after.state, after.lease, after.result, after.errors) == (
        rescued.state, rescued.lease, rescued.result, rescued.errors)


def test_the_new_claim_wins_over_the_rescued_one(claimed):
    first = claimed()
    _rescue_everything()
    Job.objects.filter(id=first.id).update(available_at=timezone.now())
    second = kathikon.claim(first.id, node="runner-2")
    assert second.lease == first.lease + 1
    with pytest.raises(kathikon.StaleLease):
        kathikon.complete(first, {"by": "runner-1"})
    kathikon.complete(second, {"by": "runner-2"})
    stored = kathikon.fetch(first.id)
    assert (stored.state, stored.result, stored.attempted_by) == (
        "completed", {"by": "runner-2"}, "runner-2")


def test_a_finished_job_cannot_be_finished_twice(claimed):
    job = claimed()
    kathikon.complete(job, {"n": 1})
    with pytest.raises(kathikon.InvalidState, match="not claimed"):
        kathikon.complete(job, {"n": 2})
    assert kathikon.fetch(job.id).result == {"n": 1}


@pytest.mark.parametrize(("call", "key"), [
    (lambda job: kathikon.complete(job, {"bad": object()}), "result"),
    (lambda job: kathikon.complete(job, {"nul": "\x00"}), "result['nul']"),
    (lambda job: kathikon.fail(job, 42), "error"),
    (lambda job: kathikon.fail(job, "busy", retry_in=math.nan), "retry_in"),
    (lambda job: kathikon.fail(job, "busy", retry_in=1e300), "retry_in"),
    (lambda job: kathikon.snooze(job, -1), "seconds"),
    (lambda job: kathikon.snooze(job, 1e12), "seconds"),
    (lambda job: kathikon.complete(job.id.hex), "job"),
])
def test_bad_outcomes_are_refused_and_the_job_stays_claimed(claimed, call, key):
    job = claimed()
    with pytest.raises(kathikon.InvalidJob) as info:
        call(job)
    assert info.value.key == key
    stored = kathikon.fetch(job.id)
    assert (stored.state, stored.lease) == ("claimed", job.lease)
    kathikon.complete(job)  # the claim is still good
    assert kathikon.fetch(job.id).state == "completed"


def test_an_unclaimed_job_is_refused(insert_job):
    job = insert_job()
    with pytest.raises(kathikon.InvalidState, match="claim it"):
        kathikon.complete(job)
    assert kathikon.fetch(job.id).state == "available"


def test_completing_the_last_child_completes_its_batch(insert_job):
    batch = kathikon.Batch.start(None, [(workers.Succeed, {"i": 0})],
                                 on_complete=(workers.Succeed, {"done": True}))
    child = kathikon.claim_available("default", node="runner-1")
    assert child is not None and child.batch_id.hex == batch.id
    kathikon.complete(child)
    after = kathikon.Batch.fetch(batch.id)
    assert after.status == "completed" and after.callback_job_id is not None
    assert kathikon.fetch(after.callback_job_id).args["completed"] == 1


def test_async_twins(claimed):
    from asgiref.sync import async_to_sync

    first, second = claimed(), claimed()
    async_to_sync(kathikon.acomplete)(first, {"ok": True})
    async_to_sync(kathikon.asnooze)(second, 30)
    assert kathikon.fetch(first.id).result == {"ok": True}
    assert kathikon.fetch(second.id).state == "scheduled"
