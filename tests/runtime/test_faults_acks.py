"""Fault tests (issue 10): no outcome can wedge a worker. Real ``kathikon_worker`` processes.

Each case inserts its poison job *before* ordinary jobs of the same queue, then asserts
within a bound of seconds: every ordinary job completes exactly once; the poison job ends
retryable or dead with its real error recorded; nothing stays claimed or running; the worker
still serves new jobs. PostgreSQL always; MariaDB and SQLite too where the case applies.
"""

from __future__ import annotations

import datetime as dt
import signal
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.db.models import Count

import kathikon
from kathikon import Batch
from kathikon.models import Job
from kathikon.storable import MAX_DELAY, MAX_MESSAGE
from kathikon.storage.batches import AWAITING
from testproject.demo.models import Execution

from .conftest import wait_until

pytestmark = pytest.mark.slow

RECORD = "testproject.demo.workers.Record"
POISON = "tests.runtime.fault_workers.Poison"
FAST = {"POLL_INTERVAL": 0.2, "SCHEDULER_INTERVAL": 0.2, "HEARTBEAT_INTERVAL": 1}
ORDINARY = 20
BOUND = 30  # seconds for the whole drain, on a loaded two-core machine


def start_worker(worker_processes):
    worker = worker_processes.start("--queues", "default:4", "--node", "faults", settings=FAST)
    worker.wait_for_log("kathikon worker", 30)
    return worker


def runs_per_job() -> dict[str, int]:
    return dict(Execution.objects.values_list("job_id").annotate(n=Count("id")))


def assert_poison_failed(poison_id) -> Job:
    wait_until(lambda: kathikon.fetch(poison_id).state in ("retryable", "dead"), BOUND,
               interval=0.2, message="the poison job's failed attempt recorded")
    return kathikon.fetch(poison_id)


def assert_not_wedged(worker, ordinary_ids) -> None:
    """Every ordinary job completed once, nothing left executing, new jobs still served."""
    wait_until(lambda: Job.objects.filter(id__in=ordinary_ids, state="completed").count()
               == len(ordinary_ids), BOUND, interval=0.2, message="every ordinary job completed")
    runs = runs_per_job()
    assert all(runs.get(job_id.hex) == 1 for job_id in ordinary_ids), runs
    wait_until(lambda: not Job.objects.filter(state__in=["claimed", "running"]).exists(), 10,
               message="nothing claimed or running")
    after = kathikon.insert(RECORD, {"after": True})
    wait_until(lambda: kathikon.fetch(after.id).state == "completed", BOUND,
               message="a new job served")
    assert runs_per_job()[after.id.hex] == 1
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.log()


def insert_poison_then_ordinary(worker_path: str, args: dict) -> tuple[Job, list]:
    poison = kathikon.insert(worker_path, args)
    result = kathikon.insert_many([(RECORD, {"n": i}) for i in range(ORDINARY)])
    return poison, [Job.objects.get(id=job_id).id for job_id in result.ids]


CASES = {
    # case: (worker, args, expected kind, text in the message, databases); a result that
    # cannot be stored completes its job instead: tests/runtime/test_faults_results.py
    "nul": (POISON, {"case": "nul"}, "builtins.ValueError", "bad \ufffd byte", "all"),
    "surrogate": (POISON, {"case": "surrogate"}, "builtins.ValueError",
                  "lone \ufffd surrogate", "all"),
    "retry_1e12": (POISON, {"case": "retry_far"}, "kathikon.workers.Retry",
                   "come back much later", "all"),
    "snooze_inf": (POISON, {"case": "snooze_inf"}, "builtins.ValueError",
                   "Snooze needs a finite number of seconds", "all"),
    "backoff_inf": ("tests.runtime.fault_workers.InfiniteBackoff", {}, "builtins.ValueError",
                    "infinite backoff", "all"),
    "message_140mb": (POISON, {"case": "huge"}, "builtins.ValueError", "characters cut",
                      "postgresql"),
    "system_exit": (POISON, {"case": "system_exit"}, "builtins.SystemExit", "3", "all"),
    "keyboard_interrupt": (POISON, {"case": "keyboard_interrupt"},
                           "builtins.KeyboardInterrupt", "", "all"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_faults_a_poison_outcome_never_wedges_the_worker(worker_processes, vendor, case):
    worker_path, args, kind, text, databases = CASES[case]
    if databases != "all" and vendor != databases:
        pytest.skip(f"{case}: {databases} only (one 140 MB run is enough for the machine)")
    poison, ordinary = insert_poison_then_ordinary(worker_path, args)
    worker = start_worker(worker_processes)
    job = assert_poison_failed(poison.id)
    assert_not_wedged(worker, ordinary)
    error = job.errors[-1]
    assert (job.state, error["kind"]) == ("retryable", kind), job.errors
    assert text in error["message"]
    assert len(error["message"]) <= MAX_MESSAGE
    if case in ("retry_1e12", "backoff_inf"):  # clamped to the documented maximum
        waits = (job.available_at - dt.datetime.fromisoformat(error["at"])).total_seconds()
        assert waits == pytest.approx(MAX_DELAY, abs=60)
    assert "retrying in" not in worker.log()  # no ack was retried: nothing reached the acker


def test_faults_a_retried_ack_keeps_the_batch_parent_running(worker_processes, concurrent_db,
                                                             tmp_path: Path):
    """The first write of the parent's ack fails (its connection is cut while it waits for
    the parent's row); the retry still holds the parent while its batch is open.

    PostgreSQL and MariaDB (SQLite has no connection to cut: its retried hold is tested
    in-process, tests/runtime/test_acker_outcomes.py)."""
    gate = str(tmp_path / "gate")
    parent, ordinary = insert_poison_then_ordinary("tests.runtime.fault_workers.BatchParent",
                                                   {"gate": gate})
    worker = start_worker(worker_processes)
    wait_until(lambda: Path(f"{gate}.started").exists(), BOUND, message="the parent performing")
    with transaction.atomic():
        list(Job.objects.select_for_update().filter(id=parent.id))  # the ack waits for this
        Path(f"{gate}.go").write_text("1")
        blocked = wait_until(waiting_backend, BOUND, message="the ack waiting for the lock")
        cut_connection(blocked)
    wait_until(lambda: "retrying in" in worker.log(), BOUND, message="the ack retried")
    wait_until(lambda: kathikon.fetch(parent.id).meta.get(AWAITING), BOUND,
               message="the parent held")
    held = kathikon.fetch(parent.id)
    assert held.state == "running" and held.completed_at is None  # its batch is open
    batch = Batch.fetch(held.result["batch"])
    assert batch.status == "open"
    Batch.close(batch.id)
    wait_until(lambda: kathikon.fetch(parent.id).state == "completed", BOUND,
               message="the parent completed at close")
    job = kathikon.fetch(parent.id)
    assert job.errors == [] and job.result == {"batch": batch.id}
    assert_not_wedged(worker, ordinary)  # the batch's child included: it ran exactly once
    assert Batch.fetch(batch.id).status == "completed"


def waiting_backend() -> int | None:
    """The id of another connection to this database waiting for a row lock, if any."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_stat_clear_snapshot()")  # fresh inside a transaction
            cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                           "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()")
        else:
            cursor.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() "
                           "AND ID <> CONNECTION_ID() AND INFO LIKE '%%FOR UPDATE%%'")
        row = cursor.fetchone()
    return row[0] if row else None


def cut_connection(backend: int) -> None:
    """Terminate another connection: its statement fails as a lost connection."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_terminate_backend(%s)", [backend])
        else:
            cursor.execute(f"KILL CONNECTION {int(backend)}")


def test_faults_inline_testing_mode_records_system_exit(transactional_db):
    from kathikon.testing import testing_mode

    with testing_mode("inline"):
        job = kathikon.insert(POISON, {"case": "system_exit"})  # SystemExit does not escape
        assert job.state == "retryable"
        with pytest.raises(KeyboardInterrupt):  # Ctrl-C still stops a test run…
            kathikon.insert(POISON, {"case": "keyboard_interrupt"})
        after = kathikon.insert(RECORD, {})
    stored = kathikon.fetch(job.id)
    assert (stored.state, stored.errors[0]["kind"]) == ("retryable", "builtins.SystemExit")
    (interrupted,) = [j for j in Job.objects.exclude(id__in=[job.id, after.id])]  # …recorded
    assert (interrupted.state, interrupted.errors[0]["kind"]) == (
        "retryable", "builtins.KeyboardInterrupt")
    assert kathikon.fetch(after.id).state == "completed"
    assert not Job.objects.filter(state__in=["claimed", "running"]).exists()
