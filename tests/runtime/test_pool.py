"""The executor and its pool in-process: timeouts, dead threads, BaseExceptions, open atomics."""

from __future__ import annotations

import asyncio
import threading

import pytest

import kathikon
from kathikon import storage
from kathikon.executor import Executor, job_timeout
from kathikon.models import Job
from kathikon.runtime import loop
from kathikon.runtime.acker import Acker
from kathikon.runtime.pool import ExecutorPool
from tests import workers

from . import poison_workers as poison
from .conftest import serve_pool, wait_until

NODE = "pool-node"
POISON = "tests.runtime.poison_workers"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def pool(transactional_db):
    yield from serve_pool(ExecutorPool("default", 2, Acker().start(), clock=Clock(),
                                       watchdog=False))


def run(pool: ExecutorPool, worker: str, args: dict | None = None) -> Job:
    """Insert one job in a queue of its own, claim it, hand it to ``pool`` and wait until its
    outcome is written."""
    queue = f"q{Job.objects.count()}"
    if worker.startswith("tests.runtime.poison_import."):  # not insertable: the import raises
        inserted = kathikon.insert("tests.workers.Succeed", args or {}, queue=queue)
        Job.objects.filter(id=inserted.id).update(worker=worker)
    else:
        inserted = kathikon.insert(worker, args or {}, queue=queue)
    (job,) = storage.claim_jobs(queue, 1, NODE)
    pool.submit([job])
    wait_until(lambda: pool.held == 0, 10, message=f"{worker} left its slot")
    assert pool.acker.flush(10)
    return kathikon.fetch(job.id)


def test_executor_timeout_comes_from_timeout_for_and_is_validated():
    job = Job(worker=f"{POISON}.TimedeltaTimeout", meta={})
    assert job_timeout(poison.TimedeltaTimeout, job) == 30.0
    assert job_timeout(workers.Emails, job) == 5.0
    assert job_timeout(workers.Succeed, job) is None
    assert Executor().plan(job).timeout == 30.0
    junk = Executor().plan(Job(worker=f"{POISON}.JunkTimeout"))
    assert junk.timeout is None and "must be a number of seconds" in str(junk.error)
    for bad in (True, -1, 0, float("nan"), float("inf"), "5"):
        class Bad(kathikon.Worker):
            timeout = bad
        with pytest.raises(Exception, match="number of seconds"):
            job_timeout(Bad, job)


def test_pool_a_timedelta_timeout_runs_and_its_deadline_is_in_seconds(pool):
    assert run(pool, f"{POISON}.TimedeltaTimeout").state == "completed"
    poison.HELD["td"] = threading.Event()
    kathikon.insert(f"{POISON}.HeldTimedelta", {"key": "td"})
    (job,) = storage.claim_jobs("default", 1, NODE)
    pool.submit([job])
    wait_until(lambda: pool._slots and next(iter(pool._slots.values())).started, 5)
    slot = next(iter(pool._slots.values()))
    assert (slot.timeout, slot.deadline) == (30.0, slot.started + 30.0)
    poison.HELD["td"].set()
    wait_until(lambda: pool.held == 0, 5, message="the held job finished")
    assert pool.acker.flush(5) and kathikon.fetch(job.id).state == "completed"


def test_pool_junk_timeout_and_import_error_fail_the_attempt_and_the_thread_serves_on(pool):
    junk = run(pool, f"{POISON}.JunkTimeout")
    assert junk.state == "retryable"
    assert junk.errors[-1]["kind"] == "django.core.exceptions.ImproperlyConfigured"
    assert "timeout must be a number of seconds" in junk.errors[-1]["message"]
    broken = run(pool, "tests.runtime.poison_import.Never")
    assert broken.state in ("retryable", "dead")
    assert broken.errors[-1]["kind"] == "builtins.RuntimeError"
    assert "cannot be imported" in broken.errors[-1]["message"]
    assert run(pool, "tests.workers.Succeed").state == "completed"
    assert pool.died == 0


def test_pool_watchdog_fails_an_overdue_job_and_replaces_its_thread(pool):
    poison.HELD["slow"] = threading.Event()
    inserted = kathikon.insert(f"{POISON}.HeldFiveSeconds", {"key": "slow"})
    (job,) = storage.claim_jobs("default", 1, NODE)
    pool.submit([job])
    wait_until(lambda: pool._slots and next(iter(pool._slots.values())).deadline, 5)
    started = next(iter(pool._slots.values())).started
    assert pool.watch(started + 4.5) == pytest.approx(0.5) and pool.held == 1
    pool.watch(started + 5.0)
    assert pool.held == 0 and pool.timed_out == 1 and pool.acker.flush(5)
    failed = kathikon.fetch(inserted.id)
    assert failed.errors[-1]["kind"].endswith("JobTimeout")
    assert failed.state == "retryable"
    poison.HELD["slow"].set()  # the abandoned thread returns: its outcome is discarded
    assert run(pool, "tests.workers.Succeed").state == "completed"
    assert pool.acker.flush(5)
    assert kathikon.fetch(inserted.id).state == "retryable"


def test_pool_a_dying_executor_thread_fails_its_job_and_is_replaced(pool, monkeypatch):
    acker = pool.acker
    real_add = acker.add
    calls = []

    def add_once_dies(execution):
        calls.append(execution)
        if len(calls) == 1:
            raise KeyboardInterrupt("injected into the executor thread")
        real_add(execution)

    monkeypatch.setattr(acker, "add", add_once_dies)
    died = run(pool, "tests.workers.Succeed")
    assert pool.died == 1
    assert died.errors[-1]["kind"] == "kathikon.ExecutorThreadDied"
    assert "KeyboardInterrupt" in died.errors[-1]["message"]
    assert died.state == "retryable"
    assert run(pool, "tests.workers.Succeed").state == "completed"


def test_pool_watchdog_fails_the_job_of_a_thread_that_is_gone(pool):
    poison.HELD["gone"] = threading.Event()
    inserted = kathikon.insert(f"{POISON}.Held", {"key": "gone"})
    (job,) = storage.claim_jobs("default", 1, NODE)
    pool.submit([job])
    wait_until(lambda: pool._slots and next(iter(pool._slots.values())).thread, 5)
    slot = next(iter(pool._slots.values()))
    ghost = threading.Thread(target=lambda: None)
    ghost.start()
    ghost.join()
    slot.thread = ghost  # as if the thread running the job had vanished
    pool.watch()
    assert pool.held == 0 and pool.died == 1 and pool.acker.flush(5)
    assert kathikon.fetch(inserted.id).errors[-1]["kind"] == (
        "kathikon.ExecutorThreadDied")


@pytest.mark.parametrize("worker,kind", [
    ("SyncExit", "builtins.SystemExit"),
    ("AsyncSystemExit", "builtins.SystemExit"),
    ("AsyncKeyboardInterrupt", "builtins.KeyboardInterrupt"),
])
def test_pool_base_exceptions_from_perform_keep_their_class(pool, worker, kind):
    job = run(pool, f"{POISON}.{worker}")
    assert (job.state, job.errors[-1]["kind"]) == ("retryable", kind)
    assert loop.process_loop().alive
    assert run(pool, "tests.workers.AsyncSucceed").state == "completed"


def test_pool_a_dead_event_loop_fails_its_jobs_and_is_restarted(pool):
    before = loop.process_loop()
    bystander = kathikon.insert(f"{POISON}.AsyncSleeps", {"sleep": 30})
    (waiting,) = storage.claim_jobs("default", 1, NODE)
    pool.submit([waiting])
    # The bystander must be waiting on this loop before it is stopped (on a busy machine
    # its thread may start late, and would then start a new loop and sleep there).
    wait_until(lambda: asyncio.all_tasks(before.loop), 10, message="the bystander waits")
    stopped = run(pool, f"{POISON}.StopsTheLoop", {"sleep": 30})
    assert stopped.errors[-1]["kind"] == "kathikon.EventLoopDied"
    wait_until(lambda: pool.held == 0, 5, message="the bystander failed too")
    assert pool.acker.flush(5)
    assert kathikon.fetch(bystander.id).errors[-1]["kind"] == (
        "kathikon.EventLoopDied")
    assert not before.alive
    assert loop.revive() and not loop.revive()  # the worker's health check restarts it
    assert loop.process_loop() is not before and loop.process_loop().alive
    assert run(pool, "tests.workers.AsyncSucceed").state == "completed"


def test_pool_a_transaction_left_open_is_rolled_back_and_fails_the_attempt(pool):
    poison_job = run(pool, f"{POISON}.LeavesTransactionOpen")
    assert poison_job.state == "retryable"
    assert poison_job.errors[-1]["kind"] == "kathikon.TransactionLeftOpen"
    assert "perform left a transaction open" in poison_job.errors[-1]["message"]
    assert not Job.objects.filter(queue="poison-writes").exists()  # its write rolled back
    for _ in range(3):  # the same threads run ORM jobs normally afterwards
        assert run(pool, "testproject.demo.workers.Record").state == "completed"
