"""kathikon.Batch: open/append/close in every sensible order, counts, the callback exactly once,
and the parent's state."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connections

import kathikon
from kathikon import Batch, BatchClosed, BatchNotFound, InvalidJob, JobNotFound, signals
from kathikon.batch import complete_finished_batches
from kathikon.executor import execute_job
from kathikon.models import Batch as BatchRow
from kathikon.models import Job
from kathikon.storage.batches import AWAITING

from .conftest import drain

pytestmark = pytest.mark.django_db

SUCCEED = "tests.workers.Succeed"
PARENT = "tests.scheduling.workers.OpensBatch"


def parent_job(worker: str = SUCCEED, **args) -> Job:
    return kathikon.insert(worker, args, queue="parents")


def callbacks() -> list[Job]:
    return list(Job.objects.filter(worker=SUCCEED, args__has_key="batch_id"))


def children(batch: Batch) -> list[Job]:
    return list(Job.objects.filter(batch_id=batch.id).order_by("id"))


def test_start_runs_children_then_one_callback_with_counts():
    parent = parent_job()
    batch = Batch.start(parent.id.hex, [(SUCCEED, {"n": n}) for n in range(3)],
                        on_complete=(SUCCEED, {"report": "r1"}, {"queue": "emails"}))
    assert batch.status == "closed" and batch.batch_id == batch.id
    assert batch.counts["available"] == 3 and batch.total == 3 and batch.finished == 0
    kids = children(batch)
    assert all(k.batch_id.hex == batch.id and k.parent_job_id == parent.id for k in kids)
    assert drain() == 3
    [callback] = callbacks()
    assert callback.args == {"report": "r1", "batch_id": batch.id, "completed": 3, "dead": 0,
                             "cancelled": 0}
    assert callback.queue == "emails" and callback.parent_job_id == parent.id
    assert callback.batch_id is None  # the callback is not a child of its own batch
    done = Batch.fetch(batch.id)
    assert done.status == "completed" and done.callback_job_id == callback.id.hex
    assert done.counts["completed"] == 3 and done.completed_at is not None


def test_start_with_no_children_completes_at_once():
    batch = Batch.start(None, [], on_complete=(SUCCEED, {}))
    assert batch.status == "completed"
    [callback] = callbacks()
    assert callback.args["completed"] == 0


def test_open_append_close_then_children_finish():
    batch = Batch.open(None, on_complete=(SUCCEED, {}))
    assert batch.status == "open" and batch.total == 0
    result = Batch.append(batch.id, [(SUCCEED, {"n": 1}), (SUCCEED, {"n": 2}, {"priority": 5})])
    assert result.inserted == 2 and len(result.ids) == 2
    Batch.append(batch.id, [(SUCCEED, {"n": 3})])
    assert Batch.close(batch.id).status == "closed"
    assert not callbacks()
    drain()
    assert callbacks()[0].args["completed"] == 3


def test_children_finishing_before_close_wait_for_close():
    batch = Batch.open(None, on_complete=(SUCCEED, {}))
    Batch.append(batch.id, [(SUCCEED, {"n": n}) for n in range(2)])
    drain()
    assert Batch.fetch(batch.id).status == "open" and not callbacks()
    assert Batch.close(batch.id).status == "completed"  # everything finished: callback at once
    assert len(callbacks()) == 1
    assert Batch.close(batch.id).status == "completed"  # closing again changes nothing
    assert len(callbacks()) == 1


def test_some_children_before_close_some_after():
    batch = Batch.open(None, on_complete=(SUCCEED, {}))
    Batch.append(batch.id, [(SUCCEED, {"n": 1})])
    drain()
    Batch.append(batch.id, [(SUCCEED, {"n": 2})])
    Batch.close(batch.id)
    assert not callbacks()
    drain()
    assert callbacks()[0].args["completed"] == 2


def test_open_then_close_empty_completes():
    batch = Batch.open(None, on_complete=(SUCCEED, {"empty": True}))
    Batch.close(batch.id)
    assert callbacks()[0].args == {"empty": True, "batch_id": batch.id, "completed": 0,
                                   "dead": 0, "cancelled": 0}


def test_append_after_close_is_refused():
    batch = Batch.open(None, on_complete=None)
    Batch.close(batch.id)
    with pytest.raises(BatchClosed):
        Batch.append(batch.id, [(SUCCEED, {})])
    started = Batch.start(None, [(SUCCEED, {})], on_complete=None)
    with pytest.raises(BatchClosed):
        Batch.append(started.id, [(SUCCEED, {})])
    assert Job.objects.filter(batch_id__isnull=False).count() == 1


def test_unknown_batches_and_parents():
    for call in (lambda: Batch.fetch("0" * 32), lambda: Batch.close("0" * 32),
                 lambda: Batch.append("0" * 32, []), lambda: Batch.fetch("nope")):
        with pytest.raises(BatchNotFound):
            call()
    with pytest.raises(JobNotFound):
        Batch.open("0" * 32, on_complete=None)
    with pytest.raises(JobNotFound):
        Batch.start("not-an-id", [], on_complete=None)


def test_bad_specs_insert_nothing():
    with pytest.raises(InvalidJob, match="child spec 1"):
        Batch.start(None, [(SUCCEED, {}), ("tests.workers.Nope", {})], on_complete=None)
    batch = Batch.open(None, on_complete=None)
    with pytest.raises(InvalidJob):
        Batch.append(batch.id, [(SUCCEED, {}), (SUCCEED, {"bad": object()})])
    with pytest.raises(InvalidJob):
        Batch.append(batch.id, [(SUCCEED, {}, {"batch_id": batch.id})])
    assert not Job.objects.exists()
    for on_complete in ((SUCCEED,), ("tests.workers.Nope", {}), (SUCCEED, {}, {"bogus": 1}),
                        (SUCCEED, {"x": {1, 2}})):
        with pytest.raises(InvalidJob):
            Batch.open(None, on_complete=on_complete)
    assert BatchRow.objects.count() == 1


def test_dead_and_cancelled_children_are_counted():
    batch = Batch.start(None, [
        (SUCCEED, {"n": 1}), (SUCCEED, {"n": 2}),
        ("tests.workers.RaiseDiscard", {}),            # dead at once
        ("tests.workers.Explode", {}, {"max_attempts": 1}),  # dead: out of attempts
        (SUCCEED, {"n": 3}, {"schedule_in": 3600}),     # cancelled below
        (SUCCEED, {"n": 4}),                             # cancelled below
    ], on_complete=(SUCCEED, {}))
    scheduled, available = children(batch)[4:]
    kathikon.cancel(scheduled.id)
    kathikon.cancel(available.id)
    drain()
    [callback] = callbacks()
    assert {k: callback.args[k] for k in ("completed", "dead", "cancelled")} == {
        "completed": 2, "dead": 2, "cancelled": 2}


def test_cancelling_the_last_child_completes_the_batch():
    batch = Batch.start(None, [(SUCCEED, {}, {"schedule_in": 600})], on_complete=(SUCCEED, {}))
    kathikon.cancel(children(batch)[0].id)
    assert callbacks()[0].args["cancelled"] == 1


def test_retried_children_keep_the_batch_open_until_they_finish():
    batch = Batch.start(None, [("tests.workers.Explode", {}, {"max_attempts": 2})],
                        on_complete=(SUCCEED, {}))
    drain()  # attempt 1 fails: retryable, not terminal
    assert Batch.fetch(batch.id).status == "closed" and not callbacks()
    Job.objects.filter(batch_id=batch.id).update(available_at=Job.objects.get(
        batch_id=batch.id).inserted_at)
    drain()
    assert callbacks()[0].args["dead"] == 1


def test_no_callback_still_completes_with_a_signal():
    seen = []

    def receiver(sender, **kwargs):
        seen.append((sender, kwargs["batch"].status, kwargs["callback_job"],
                     kwargs["completed"], kwargs["dead"], kwargs["cancelled"]))

    signals.batch_completed.connect(receiver)
    try:
        batch = Batch.start(None, [(SUCCEED, {})], on_complete=None)
        drain()
    finally:
        signals.batch_completed.disconnect(receiver)
    assert seen == [(BatchRow, "completed", None, 1, 0, 0)]
    assert Batch.fetch(batch.id).callback_job_id is None


def test_completion_happens_once_however_often_it_is_checked():
    batch = Batch.start(None, [(SUCCEED, {})], on_complete=(SUCCEED, {}))
    job = kathikon.claim_available()
    Job.objects.filter(pk=job.pk).update(state="completed")  # finished behind our back
    assert complete_finished_batches() == [BatchRow.objects.get().id]
    assert complete_finished_batches() == []
    assert complete_finished_batches([BatchRow.objects.get().id]) == []
    assert len(callbacks()) == 1
    assert Batch.fetch(batch.id).status == "completed"


def test_the_cron_scheduler_sweep_completes_batches_missed_by_the_hooks(clock):
    from kathikon.runtime.scheduler import CronScheduler

    batch = Batch.start(None, [(SUCCEED, {})], on_complete=(SUCCEED, {}))
    Job.objects.filter(batch_id=batch.id).update(state="dead")  # e.g. an admin bulk edit
    CronScheduler("n", clock=clock, sync=False).run_once()
    assert callbacks()[0].args["dead"] == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_checks_enqueue_one_callback(concurrent_db):
    batch = Batch.start(None, [(SUCCEED, {"n": n}) for n in range(4)], on_complete=(SUCCEED, {}))
    Job.objects.filter(batch_id=batch.id).update(state="completed")
    barrier = threading.Barrier(6)
    won: list[int] = []
    errors: list[BaseException] = []

    def node() -> None:
        try:
            barrier.wait(5)
            won.append(len(complete_finished_batches()))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=node) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert not errors and sum(won) == 1
    assert len(callbacks()) == 1


# -- the parent ------------------------------------------------------------------------------


def run_parent(worker: str, **args) -> Job:
    job = parent_job(worker, **args)
    assert drain("parents") == 1
    return kathikon.fetch(job.id)


def test_a_parent_whose_batch_is_open_stays_running_until_close():
    completed = []
    signals.job_completed.connect(lambda sender, **kw: completed.append(kw["job"].id),
                                  weak=False, dispatch_uid="test-parent")
    try:
        parent = run_parent(PARENT, children=2)
        assert parent.state == "running" and parent.completed_at is None
        assert parent.result == {"batch": BatchRow.objects.get().id.hex}
        assert parent.meta == {AWAITING: True}
        assert parent.id not in completed
        drain()  # the children finish; the batch is still open
        assert kathikon.fetch(parent.id).state == "running" and not callbacks()
        batch = BatchRow.objects.get()
        Batch.close(batch.id)
        parent = kathikon.fetch(parent.id)
        assert parent.state == "completed" and parent.meta == {}
        assert parent.result == {"batch": batch.id.hex}
        assert parent.id in completed
        assert callbacks()[0].args["from"] == "parent"
    finally:
        signals.job_completed.disconnect(dispatch_uid="test-parent")


def test_closing_before_the_children_finish_completes_the_parent_at_close():
    parent = run_parent(PARENT, children=2)
    Batch.close(BatchRow.objects.get().id)
    assert kathikon.fetch(parent.id).state == "completed"
    assert not callbacks()
    drain()
    assert len(callbacks()) == 1


def test_a_parent_that_closes_its_batch_itself_completes_normally():
    parent = run_parent("tests.scheduling.workers.OpensAndCloses")
    assert parent.state == "completed" and parent.result == "closed inside"
    parent = run_parent("tests.scheduling.workers.StartsBatch")
    assert parent.state == "completed"


def test_a_parent_with_two_open_batches_waits_for_both():
    parent = run_parent("tests.scheduling.workers.OpensTwoBatches")
    first, second = parent.result["batches"]
    Batch.close(first)
    assert kathikon.fetch(parent.id).state == "running"
    Batch.close(second)
    assert kathikon.fetch(parent.id).state == "completed"


def test_a_parent_that_fails_after_opening_is_not_held():
    parent = run_parent("tests.scheduling.workers.OpensThenFails")
    assert parent.state == "retryable"
    assert BatchRow.objects.get().status == "open"


def test_a_batch_opened_for_a_parent_that_is_not_running_here_does_not_hold_it():
    parent = parent_job()
    batch = Batch.open(parent.id, on_complete=None)
    execute_job(kathikon.claim_available("parents"))
    assert kathikon.fetch(parent.id).state == "completed"
    Batch.close(batch.id)
    assert Batch.fetch(batch.id).status == "completed"


# -- the cost on the hot path ----------------------------------------------------------------


def settle_queries(django_assert_max_num_queries, job) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from kathikon.executor import run_job, settle

    execution = run_job(job)
    with CaptureQueriesContext(connection) as captured:
        settle([execution])
    return len(captured)


def test_ordinary_jobs_pay_nothing_and_children_one_query(django_assert_max_num_queries):
    kathikon.insert(SUCCEED, {})
    plain = settle_queries(django_assert_max_num_queries, kathikon.claim_available())
    batch = Batch.open(None, on_complete=None)
    Batch.append(batch.id, [(SUCCEED, {})])
    child = settle_queries(django_assert_max_num_queries, kathikon.claim_available())
    assert child == plain + 1


def test_a_child_rescued_to_dead_by_the_lifeline_completes_the_batch():
    from kathikon import storage
    from kathikon.runtime.lifeline import Lifeline

    batch = Batch.start(None, [(SUCCEED, {}, {"max_attempts": 1})], on_complete=(SUCCEED, {}))
    child = kathikon.claim_available(node="ghost")  # an external runner (no node row) ...
    assert child.batch_id.hex == batch.id
    Job.objects.filter(id=child.id).update(  # ... that never finished: out of attempts
        started_at=storage.db_now() - dt.timedelta(hours=1))
    [rescued] = Lifeline("rescuer", rescue_after=60, settle_after=0).run_once()
    assert rescued.state == "dead"
    assert callbacks()[0].args["dead"] == 1


def test_a_held_parent_is_not_taken_for_an_orphaned_claim():
    from kathikon.storage import executing_jobs

    parent = run_parent(PARENT, children=1)
    assert parent.state == "running"
    assert executing_jobs(parent.attempted_by, "parents") == []
    Batch.close(BatchRow.objects.get().id)
    assert kathikon.fetch(parent.id).state == "completed"


@pytest.mark.django_db(transaction=True)  # the event loop's thread has its own connection
def test_an_async_parent_is_held_too():
    parent = run_parent("tests.scheduling.workers.AsyncOpensBatch")
    assert parent.state == "running"
    Batch.close(parent.result["batch"])
    assert kathikon.fetch(parent.id).state == "completed"
