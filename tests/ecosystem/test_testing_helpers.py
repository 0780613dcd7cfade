"""kathikon.testing: perform_job, drain_queue, assert/refute/all_enqueued, testing_mode."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt

import pytest
from django.test import SimpleTestCase, override_settings
from django.utils import timezone

import kathikon
from kathikon import conf
from kathikon.testing import (
    DrainResult,
    all_enqueued,
    assert_enqueued,
    drain_queue,
    perform_job,
    refute_enqueued,
    testing_mode,
)
from tests import workers as core
from tests.ecosystem import workers

# perform_job: no database needed (these tests would fail if it touched one).


def test_perform_job_returns_what_perform_returned():
    assert perform_job(core.Succeed, {"a": 1}) == {"echo": {"a": 1}}
    assert perform_job("tests.workers.Emails", {}) == "sent"
    # A worker process completes it too, storing the marker of kathikon.storable instead
    assert type(perform_job(core.Unserialisable, {})) is object


def test_perform_job_round_trips_args_through_json():
    assert perform_job(core.Succeed, {"point": (1, 2), "n": None}) == {
        "echo": {"point": [1, 2], "n": None}}
    with pytest.raises(kathikon.InvalidJob) as info:
        perform_job(core.Succeed, {"when": dt.date(2024, 1, 1)})
    assert info.value.key == "args['when']"
    with pytest.raises(kathikon.InvalidJob, match="unknown option"):
        perform_job(core.Succeed, {}, colour="red")


def test_perform_job_raises_the_outcome():
    with pytest.raises(RuntimeError, match="boom 1"):
        perform_job(core.Explode, {})
    with pytest.raises(RuntimeError, match="boom 3"):
        perform_job(core.Explode, {}, attempt=3)
    with pytest.raises(kathikon.Retry) as retry:
        perform_job(core.AskRetry, {})
    assert retry.value.in_seconds == 30
    with pytest.raises(kathikon.Discard, match="bad input"):
        perform_job(core.RaiseDiscard, {})
    with pytest.raises(kathikon.Snooze) as snooze:
        perform_job(core.SnoozeTen, {})
    assert snooze.value.seconds == 10


def test_perform_job_runs_async_workers_with_their_timeout():
    from kathikon import JobTimeout

    assert perform_job(workers.AsyncEcho, {"value": 3})["echo"] == 3
    with pytest.raises(JobTimeout):
        perform_job(workers.AsyncSlow, {})
    with pytest.raises(KeyError):
        perform_job(workers.AsyncFails, {})


def test_perform_job_passes_options_to_the_job():
    class Peek(kathikon.Worker):
        def perform(self, job):
            return (job.queue, job.priority, job.attempts, job.max_attempts, job.meta)

    Peek.__module__, Peek.__qualname__ = __name__, "Peek"  # importable enough for the cache
    globals()["Peek"] = Peek
    assert perform_job(Peek, {}, queue="emails", priority=5, max_attempts=4, meta={"k": 1},
                       attempt=2) == ("emails", 5, 2, 4, {"k": 1})


# drain_queue


def test_drain_queue_counts_each_outcome(db, insert_job):
    insert_job(core.Succeed)
    insert_job(core.Succeed, queue="emails")
    insert_job(core.Explode)
    insert_job(core.RaiseDiscard)
    insert_job(core.SnoozeTen)
    assert drain_queue("default") == DrainResult(completed=1, failed=1, discarded=1,
                                                 snoozed=1, cancelled=0)
    assert drain_queue() == DrainResult(completed=1)
    assert drain_queue() == DrainResult()


def test_drain_result_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DrainResult().completed = 3  # type: ignore[misc]


def test_with_scheduled_runs_future_jobs_and_retries(db, insert_job):
    insert_job(core.Succeed, schedule_in=3600)
    insert_job(core.Explode)  # max_attempts 3
    assert drain_queue() == DrainResult(failed=1)
    assert drain_queue(with_scheduled=True) == DrainResult(completed=1, failed=1)
    assert drain_queue(with_scheduled=True, with_recursion=True) == DrainResult(failed=1)
    assert kathikon.dead_jobs()[0].attempts == 3


def test_with_recursion_runs_jobs_inserted_by_jobs(db, insert_job):
    insert_job(workers.Chain, {"left": 3})
    assert drain_queue() == DrainResult(completed=1)
    assert drain_queue(with_recursion=True) == DrainResult(completed=3)


def test_recursion_with_a_job_that_snoozes_forever_stops(db, insert_job, monkeypatch):
    monkeypatch.setattr("kathikon.testing.MAX_ROUNDS", 5)
    insert_job(core.SnoozeTen)
    with pytest.raises(kathikon.KathikonError, match="after 5 rounds"):
        drain_queue(with_scheduled=True, with_recursion=True)


def test_drain_counts_cancellations_and_skips_paused_queues(db, insert_job):
    victim = insert_job(core.Succeed, queue="emails", schedule_in=60)
    insert_job(workers.Canceller, {"victim": victim.id.hex})
    assert drain_queue() == DrainResult(completed=1, cancelled=1)
    insert_job(core.Succeed, queue="emails")
    later = insert_job(core.Succeed, queue="emails", schedule_in=60)
    kathikon.pause_queue("emails")
    assert drain_queue("emails") == DrainResult()
    assert drain_queue(with_scheduled=True) == DrainResult()
    assert kathikon.fetch(later.id).state == "scheduled"
    kathikon.resume_queue("emails")
    assert drain_queue("emails") == DrainResult(completed=1)
    assert drain_queue("emails", with_scheduled=True) == DrainResult(completed=1)


def test_drain_promotes_due_scheduled_jobs(db, insert_job):
    job = insert_job(core.Succeed, schedule_at=timezone.now() + dt.timedelta(milliseconds=1))
    kathikon.storage.update_job(job, available_at=timezone.now() - dt.timedelta(seconds=1))
    assert drain_queue() == DrainResult(completed=1)


# assert_enqueued / refute_enqueued / all_enqueued


def test_assert_enqueued_matches_partially(db, insert_job):
    job = insert_job(core.Succeed, {"user": {"id": 7, "name": "Ada"}, "plan": "pro"},
                     priority=3)
    assert assert_enqueued(worker=core.Succeed) == job
    assert assert_enqueued(worker="tests.workers.Succeed", args={"plan": "pro"}) == job
    assert assert_enqueued(args={"user": {"id": 7}}, queue="default", priority=3) == job
    assert assert_enqueued() == job


def test_assert_enqueued_scheduled_at(db, insert_job):
    at = timezone.now() + dt.timedelta(hours=2)
    insert_job(core.Succeed, schedule_at=at)
    assert_enqueued(scheduled_at=at + dt.timedelta(milliseconds=300))
    assert_enqueued(scheduled_at=(at + dt.timedelta(seconds=50), 60))
    with pytest.raises(AssertionError):
        assert_enqueued(scheduled_at=at + dt.timedelta(seconds=5))


def test_assert_enqueued_failure_lists_the_closest_jobs(db, insert_job):
    insert_job(core.Emails, {"to": "x"})
    insert_job(core.Succeed, {"user": 1, "plan": "free"})
    insert_job(core.Succeed, {"user": 2, "plan": "pro"})
    with pytest.raises(AssertionError) as info:
        assert_enqueued(worker=core.Succeed, args={"user": 1, "plan": "pro"})
    message = str(info.value)
    assert message.startswith("Expected a job matching worker='tests.workers.Succeed', "
                              "args={'user': 1, 'plan': 'pro'} to be enqueued; none of the 3 "
                              "enqueued jobs matches. Closest:\n  - tests.workers.Succeed")
    lines = message.splitlines()[1:]
    assert len(lines) == 3 and "tests.workers.Emails" in lines[-1]
    assert "'user': 1" in lines[0] and "'plan': 'pro'" in lines[1]  # ties: oldest first


def test_assert_enqueued_with_nothing_enqueued(db, insert_job):
    done = insert_job(core.Succeed)
    drain_queue()
    assert kathikon.fetch(done.id).state == "completed"  # finished jobs are not "enqueued"
    with pytest.raises(AssertionError, match=r"matching queue='emails' to be enqueued, but no "
                                             r"jobs are enqueued\."):
        assert_enqueued(queue="emails")


def test_refute_enqueued(db, insert_job):
    refute_enqueued(worker=core.Succeed)
    insert_job(core.Succeed, {"a": 1})
    refute_enqueued(worker=core.Succeed, args={"a": 2})
    refute_enqueued(worker=core.Emails)
    with pytest.raises(AssertionError) as info:
        refute_enqueued(args={"a": 1})
    assert str(info.value).startswith("Expected no job matching args={'a': 1} to be enqueued, "
                                      "found 1:\n  - tests.workers.Succeed queue='default'")


def test_all_enqueued(db, insert_job):
    first = insert_job(core.Succeed, {"n": 1})
    second = insert_job(core.Succeed, {"n": 2}, schedule_in=60)
    insert_job(core.Emails, {"n": 1})
    retried = insert_job(core.Explode)
    drain_queue("default")  # Succeed x1 completes, Explode becomes retryable
    assert kathikon.fetch(first.id).state == "completed"
    assert all_enqueued(worker=core.Succeed) == [second]
    assert [job.worker for job in all_enqueued(args={"n": 1})] == ["tests.workers.Emails"]
    assert all_enqueued(worker=core.Explode) == [retried]
    assert len(all_enqueued()) == 3


# testing_mode


def test_testing_mode_context_manager(db):
    with testing_mode("inline"):
        assert conf.testing_mode() == "inline"
        job = kathikon.insert(core.Succeed, {"x": 1})
        assert (job.state, job.result) == ("completed", {"echo": {"x": 1}})
        failed = kathikon.insert(core.Explode, {})
        assert (failed.state, failed.attempts) == ("retryable", 1)
        later = kathikon.insert(core.Succeed, {}, schedule_in=60)
        assert later.state == "scheduled"  # left for drain_queue(with_scheduled=True)
        result = kathikon.insert_many([(core.Succeed, {"n": n}) for n in range(3)])
        assert {kathikon.fetch(i).state for i in result.ids} == {"completed"}
    assert conf.testing_mode() is None
    assert kathikon.insert(core.Succeed, {}).state == "available"


def test_inline_mode_runs_nested_inserts(db):
    with testing_mode("inline"):
        kathikon.insert(workers.Chain, {"left": 2})
    assert sorted(job.result for job in kathikon.all()) == [0, 1, 2]


@testing_mode("manual")
def test_testing_mode_decorator(db):
    assert conf.testing_mode() == "manual"
    assert kathikon.insert(core.Succeed, {}).state == "available"


def test_testing_mode_decorates_async_functions():
    @testing_mode("inline")
    async def probe():
        await asyncio.sleep(0)
        return conf.testing_mode()

    assert asyncio.run(probe()) == "inline"
    assert conf.testing_mode() is None


@testing_mode("inline")
class InlineTestCase(SimpleTestCase):
    def test_mode_applies_to_the_whole_class(self):
        assert conf.testing_mode() == "inline"


def test_testing_mode_as_a_setting_and_bad_values(db):
    with override_settings(KATHIKON={"TESTING_MODE": "inline"}):
        assert kathikon.insert(core.Succeed, {}).state == "completed"
    with pytest.raises(ValueError, match="testing_mode"):
        testing_mode("sometimes")


# the pytest plugin's fixtures


def test_fixture_inline(db, kathikon_inline):
    assert kathikon.insert(core.Succeed, {}).state == "completed"


def test_fixture_manual_and_testing(db, kathikon_manual, kathikon_testing):
    kathikon.insert(core.Succeed, {"k": 1})
    kathikon_testing.assert_enqueued(args={"k": 1})
    assert kathikon_testing.drain_queue().completed == 1
    assert conf.testing_mode() == "manual"


def test_the_plugin_imports_without_side_effects():
    """pytest loads it in every project: no settings, no models, no kathikon.testing yet."""
    import subprocess
    import sys

    script = ("import sys, kathikon.pytest_plugin\n"
              "print(sorted(m for m in sys.modules if m.startswith('kathikon.')))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True, env={"PATH": "/usr/bin:/bin"}).stdout
    for heavy in ("kathikon.models", "kathikon.api", "kathikon.testing", "kathikon.storage"):
        assert f"'{heavy}'" not in out, out


def test_drain_rolls_back_a_transaction_perform_left_open_and_keeps_the_tests(db):
    """The test's own transaction stays; only the block perform never left is rolled back."""
    from django.db import connection

    from kathikon.models import Job

    poison = kathikon.insert("tests.runtime.poison_workers.LeavesTransactionOpen", {})
    depth = len(connection.atomic_blocks)
    assert drain_queue().failed == 1
    assert len(connection.atomic_blocks) == depth
    job = kathikon.fetch(poison.id)
    assert job.errors[-1]["kind"] == "kathikon.TransactionLeftOpen"
    assert not Job.objects.filter(queue="poison-writes").exists()
    kathikon.insert(core.Succeed, {})
    assert drain_queue().completed == 1  # the ORM works on after the rollback


def test_inline_mode_rolls_back_a_transaction_perform_left_open(db):
    from kathikon.models import Job

    with testing_mode("inline"):
        job = kathikon.insert("tests.runtime.poison_workers.LeavesTransactionOpen", {})
    assert job.errors[-1]["kind"] == "kathikon.TransactionLeftOpen"
    assert job.state == "retryable"
    assert not Job.objects.filter(queue="poison-writes").exists()
