"""Fault tests of the executor: one poison job must never wedge a real ``kathikon_worker``.

Each case inserts the poison job first, then ordinary jobs in the same queue,
and asserts within a bound of seconds that every ordinary job completed
exactly once (``testproject.demo.workers.Record`` writes one row per run), that
the poison ended retryable or dead with its real error recorded, that nothing
stays claimed or running, and that the worker still serves new jobs.
"""

from __future__ import annotations

import signal

import pytest
from django.db import transaction
from django.db.models import Count

import kathikon
from kathikon.models import Job
from testproject.demo.models import Execution

from .conftest import WorkerProcess, WorkerProcesses, wait_until

pytestmark = pytest.mark.slow

RECORD = "testproject.demo.workers.Record"
POISON = "tests.runtime.poison_workers"
FAST = {"POLL_INTERVAL": 0.2, "HEARTBEAT_INTERVAL": 0.5, "RESCUE_AFTER": 3.0}
BOUND = 20.0  # seconds any case may take to settle on a loaded machine


def insert_ordinary(count: int = 20, worker: str = RECORD) -> list[str]:
    return [str(i) for i in kathikon.insert_many([(worker, {"n": n}) for n in range(count)]).ids]


def runs_per_job() -> dict[str, int]:
    return dict(Execution.objects.values_list("job_id").annotate(n=Count("id")))


def all_completed(ids: list[str]) -> bool:
    return Job.objects.filter(id__in=ids, state="completed").count() == len(ids)


def poison_settled(job_id: object, kinds: set[str], states=("retryable", "dead")) -> Job | None:
    job = kathikon.fetch(job_id)
    if job.state in states and job.errors and job.errors[-1]["kind"] in kinds:
        return job
    return None


def assert_healthy_after(worker: WorkerProcess, ordinary: list[str]) -> None:
    """Ordinary jobs ran exactly once, nothing is left executing, and new jobs still run."""
    wait_until(lambda: all_completed(ordinary), BOUND, message="every ordinary job completed")
    runs = runs_per_job()
    recorded = [job_id for job_id in ordinary if Job.objects.get(id=job_id).worker == RECORD]
    assert [runs.get(kathikon.fetch(i).id.hex) for i in recorded] == [1] * len(recorded)
    wait_until(lambda: not Job.objects.filter(state__in=("claimed", "running")).exists(), BOUND,
               message="nothing left claimed or running")
    fresh = kathikon.insert(RECORD, {"fresh": True})
    wait_until(lambda: kathikon.fetch(fresh.id).state == "completed", BOUND,
               message="the worker still serves new jobs")
    assert worker.returncode is None, worker.log()
    worker.signal(signal.SIGTERM)
    assert worker.wait(BOUND) == 0, worker.log()


def test_fault_a_worker_module_raising_at_import_fails_its_job(worker_processes):
    poison = kathikon.insert(RECORD, {}, max_attempts=2)
    Job.objects.filter(id=poison.id).update(worker="tests.runtime.poison_import.Never")
    ordinary = insert_ordinary()
    worker = worker_processes.start("--queues", "default:2", settings=FAST)
    job = wait_until(lambda: poison_settled(poison.id, {"builtins.RuntimeError"}), BOUND,
                     message="the import error recorded")
    assert "poison_import cannot be imported" in job.errors[-1]["message"]
    assert_healthy_after(worker, ordinary)


def test_fault_timedelta_and_junk_timeouts_on_a_worker_class(worker_processes):
    converted = kathikon.insert(f"{POISON}.TimedeltaTimeout", {})
    junk = kathikon.insert(f"{POISON}.JunkTimeout", {})
    ordinary = insert_ordinary()
    worker = worker_processes.start("--queues", "default:2", settings=FAST)
    wait_until(lambda: kathikon.fetch(converted.id).state == "completed", BOUND,
               message="the timedelta timeout converted to seconds")
    job = wait_until(lambda: poison_settled(
        junk.id, {"django.core.exceptions.ImproperlyConfigured"}, states=("dead",)), BOUND,
        message="the junk timeout failed both attempts")
    assert "timeout must be a number of seconds" in job.errors[-1]["message"]
    assert_healthy_after(worker, ordinary)


@pytest.mark.parametrize("burst", [False, True], ids=["serving", "burst"])
def test_fault_async_perform_raising_systemexit_and_keyboardinterrupt(worker_processes, burst):
    exits = kathikon.insert(f"{POISON}.AsyncSystemExit", {})
    interrupts = kathikon.insert(f"{POISON}.AsyncKeyboardInterrupt", {})
    ordinary = insert_ordinary(10) + insert_ordinary(10, f"{POISON}.AsyncSleeps")
    worker = worker_processes.start("--queues", "default:4", *(["--burst"] if burst else []),
                                    settings=FAST)
    for poison, kind in ((exits, "builtins.SystemExit"),
                         (interrupts, "builtins.KeyboardInterrupt")):
        wait_until(lambda poison=poison, kind=kind: poison_settled(poison.id, {kind}, ("dead",)),
                   BOUND, message=f"{kind} recorded with its class")
    if burst:
        assert worker.wait(BOUND) == 0, worker.log()
        assert all_completed(ordinary)
        assert set(runs_per_job().values()) == {1}
        assert not Job.objects.filter(state__in=("claimed", "running")).exists()
        return
    assert_healthy_after(worker, ordinary)
    later = kathikon.insert(f"{POISON}.AsyncSleeps", {})  # the loop still runs async jobs
    again = worker_processes.start("--queues", "default:1", "--burst", settings=FAST)
    assert again.wait(BOUND) == 0 and kathikon.fetch(later.id).state == "completed"


def test_fault_perform_leaving_a_transaction_open(worker_processes):
    poison = kathikon.insert(f"{POISON}.LeavesTransactionOpen", {})
    ordinary = insert_ordinary()
    worker = worker_processes.start("--queues", "default:1", settings=FAST)  # one thread
    job = wait_until(lambda: poison_settled(
        poison.id, {"kathikon.TransactionLeftOpen"}, ("dead",)), BOUND,
        message="both attempts failed with TransactionLeftOpen")
    assert "perform left a transaction open" in job.errors[-1]["message"]
    assert not Job.objects.filter(queue="poison-writes").exists()  # its writes rolled back
    assert_healthy_after(worker, ordinary)  # later ORM jobs on the same thread are fine


def test_fault_an_executor_thread_dying(worker_processes):
    poison = kathikon.insert(f"{POISON}.KillsItsThread", {})
    ordinary = insert_ordinary()
    worker = worker_processes.start("--queues", "default:2", settings=FAST)
    kinds = {"kathikon.ExecutorThreadDied", f"{POISON}.Unprintable",
             "builtins.KeyboardInterrupt"}
    wait_until(lambda: poison_settled(poison.id, kinds, ("dead",)), BOUND,
               message="the dead thread's job failed twice")
    assert_healthy_after(worker, ordinary)


def test_fault_an_acker_stuck_longer_than_rescue_after(worker_processes: WorkerProcesses,
                                                      concurrent_db, tmp_path):
    go = tmp_path / "go"
    poison = kathikon.insert(f"{POISON}.WaitsForFile", {"path": str(go)})
    ordinary = insert_ordinary()
    worker = worker_processes.start("--queues", "default:4", settings=FAST)
    wait_until(lambda: all_completed(ordinary), BOUND, message="the ordinary jobs completed")
    wait_until(lambda: kathikon.fetch(poison.id).state == "running", BOUND)
    with transaction.atomic():  # hold the poison's row: its ack blocks behind this lock
        Job.objects.select_for_update().get(id=poison.id)
        go.touch()  # the poison returns now; its ack waits for the lock
        assert worker.wait(FAST["RESCUE_AFTER"] + BOUND) == 1, worker.log()
    assert "the acker has written nothing" in worker.log()
    assert kathikon.fetch(poison.id).state in ("running", "available", "retryable", "completed")
    rescuer = worker_processes.start("--queues", "default:2", settings=FAST)  # the restart
    wait_until(lambda: kathikon.fetch(poison.id).state == "completed", BOUND,
               message="the stuck job rescued and run again")
    # Once, if the blocked ack went through after the lock (PostgreSQL finishes a statement
    # whose client is gone); twice, if the rescue came first and fenced it off.
    assert runs_per_job()[poison.id.hex] in (1, 2)
    assert_healthy_after(rescuer, ordinary)
