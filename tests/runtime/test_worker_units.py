"""In-process tests of the worker runtime: acker, dispatcher, listener, worker process, command."""

from __future__ import annotations

import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

import kathikon
from kathikon import storage
from kathikon.executor import record, run_job, settle
from kathikon.management.commands.kathikon_worker import check_node, parse_queues
from kathikon.models import Job, Node
from kathikon.runtime import acker as acker_module
from kathikon.runtime.acker import Acker
from kathikon.runtime.dispatcher import Dispatcher
from kathikon.runtime.worker import WorkerProcess
from tests import workers

from .conftest import connection_lost, wait_until

NODE = "unit-node"


def claim_all(queue: str = "default", limit: int = 100) -> list[Job]:
    return storage.claim_jobs(queue, limit, NODE)


# -- the command's options ------------------------------------------------------------------

def test_worker_parse_queues():
    assert parse_queues(None) is None
    assert parse_queues("emails:5,default") == {"emails": 5, "default": None}
    assert parse_queues(" a , b:2 ") == {"a": None, "b": 2}
    for bad in ("", "emails:0", "emails:x", "bad name", ","):
        with pytest.raises(CommandError):
            parse_queues(bad)


# -- the acker ------------------------------------------------------------------------------

def test_worker_acker_writes_a_burst_of_completions_in_few_batches(transactional_db, monkeypatch):
    kathikon.insert_many([(workers.Succeed, {"n": i}) for i in range(30)])
    executions = [run_job(job) for job in claim_all()]
    batches: list[int] = []
    first_call = threading.Event()
    release = threading.Event()

    def recording_record(batch):
        batches.append(len(batch))
        first_call.set()
        release.wait(5)  # hold the first write until every execution was handed over
        return record(batch)

    monkeypatch.setattr(acker_module, "record", recording_record)
    acker = Acker().start()
    acker.add(executions[0])
    assert first_call.wait(5)
    for execution in executions[1:]:
        acker.add(execution)
    release.set()
    assert acker.flush(10)
    assert acker.stop(5)
    assert batches == [1, 29]
    assert acker.written == 30 and acker.fenced == 0
    assert storage.count_by_state()["completed"] == 30


def test_worker_acker_retries_a_failed_write_until_it_succeeds(transactional_db, monkeypatch):
    kathikon.insert(workers.Succeed, {})
    (execution,) = [run_job(job) for job in claim_all()]
    calls = []

    def flaky_record(batch):
        calls.append(len(batch))
        if len(calls) <= 2:
            raise connection_lost()
        return record(batch)

    monkeypatch.setattr(acker_module, "record", flaky_record)
    acker = Acker(max_backoff=0.05).start()
    acker.add(execution)
    assert acker.flush(10)
    acker.stop(5)
    assert len(calls) == 3 and acker.failures == 2 and acker.written == 1
    assert kathikon.fetch(execution.job.id).state == "completed"


def test_worker_acker_fenced_ack_changes_nothing(transactional_db):
    job = kathikon.insert(workers.Succeed, {})
    (claimed,) = claim_all()
    execution = run_job(claimed)
    Job.objects.filter(id=job.id).update(state="retryable", lease=claimed.lease + 1)  # rescued
    acker = Acker().start()
    acker.add(execution)
    assert acker.stop(5)
    assert acker.fenced == 1 and acker.written == 0
    assert kathikon.fetch(job.id).state == "retryable"


def test_worker_settle_of_many_completions_is_one_statement_on_postgres(
        transactional_db, postgres_only):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    kathikon.insert_many([(workers.ReturnsNothing, {}) for _ in range(25)])
    executions = [run_job(job) for job in claim_all()]
    with CaptureQueriesContext(connection) as captured:
        settle(executions)
    statements = [q["sql"] for q in captured.captured_queries
                  if q["sql"] not in ("BEGIN", "COMMIT")]
    assert len(statements) == 1, statements
    assert storage.count_by_state()["completed"] == 25


# -- the dispatcher -------------------------------------------------------------------------

def test_worker_dispatcher_runs_jobs_up_to_its_concurrency(transactional_db):
    kathikon.insert_many([(workers.Succeed, {"n": i}) for i in range(40)])
    acker = Acker().start()
    dispatcher = Dispatcher("default", 4, NODE, acker, poll_interval=0.1).start()
    try:
        wait_until(lambda: dispatcher.pool.finished == 40, 10, message="40 jobs run")
        assert acker.flush(5)
        assert storage.count_by_state()["completed"] == 40
        assert dispatcher.claimed == 40
    finally:
        dispatcher.stop_claiming()
        dispatcher.join(5)
        dispatcher.close()
        acker.stop(5)


def test_worker_dispatcher_times_out_a_sync_job_and_replaces_its_thread(transactional_db):
    hangs = kathikon.insert("testproject.demo.workers.Hangs", {"seconds": 1.5})
    acker = Acker().start()
    dispatcher = Dispatcher("default", 1, NODE, acker, poll_interval=0.1).start()
    try:
        wait_until(lambda: dispatcher.pool.timed_out == 1, 5, message="the timeout")
        after = kathikon.insert(workers.Succeed, {})  # the one slot is free again
        dispatcher.wake()
        wait_until(lambda: kathikon.fetch(after.id).state == "completed", 5,
                   message="the next job ran on the freed slot")
        assert acker.flush(5)
        job = kathikon.fetch(hangs.id)
        assert job.state in ("retryable", "running", "dead")  # retried at once (backoff 0)
        assert job.errors[0]["kind"] == "kathikon.JobTimeout"
    finally:
        dispatcher.stop_claiming()
        dispatcher.join(5)
        for job in dispatcher.abandon_running():
            acker.release([storage.Ack(job, "available", restore_attempt=True)])
        dispatcher.close()
        acker.stop(5)


def test_worker_dispatcher_releases_orphans_of_a_lost_claim(transactional_db):
    job = kathikon.insert(workers.Succeed, {})
    (lost,) = claim_all()  # committed, but the dispatcher never saw the reply
    acker = Acker().start()
    dispatcher = Dispatcher("default", 2, NODE, acker, poll_interval=0.1)
    dispatcher._recover_orphans()
    assert acker.flush(5)
    released = kathikon.fetch(job.id)
    assert (released.state, released.attempts) == ("available", 0)
    assert lost.id == job.id
    acker.stop(5)


# -- the listener ---------------------------------------------------------------------------

def test_worker_listener_wakes_on_notify(transactional_db, postgres_only):
    from kathikon.runtime.listener import Listener

    events: list[tuple[str, str]] = []
    got = threading.Event()
    connects = threading.Event()

    def on_event(event: str, queue: str) -> None:
        events.append((event, queue))
        got.set()

    listener = Listener(storage.alias(), on_event, connects.set).start()
    try:
        assert connects.wait(5)
        kathikon.insert(workers.Succeed, {}, queue="mail")
        assert got.wait(5)
        assert ("available", "mail") in events
    finally:
        listener.stop()
        assert listener.join(5)


def test_worker_node_names_the_node_table_cannot_store_are_refused():
    check_node("n" * 255)
    check_node("n" * 252 + "-10")  # --processes 10: the longest name is NAME-10
    for bad, why in (("n" * 256, "at most 255"), ("n" * 253 + "-10", "at most 255"),
                     ("web\x00", "printable"), ("web\n1", "printable"),
                     ("web-\udcff", "printable")):  # argv bytes that are not UTF-8
        with pytest.raises(CommandError, match=why):
            check_node(bad)
    with pytest.raises(CommandError, match="suffix"):
        call_command("kathikon_worker", "--node", "n" * 253, "--processes", "10", "--burst")


def test_worker_with_a_too_long_node_name_exits_before_starting(worker_processes):
    """It used to wait forever for a database "unavailable at start-up", even with --burst."""
    worker = worker_processes.start("--burst", "--node", "n" * 256)
    assert worker.wait(timeout=60) == 1
    output = worker.log()
    assert "at most 255 are stored" in output and "retrying" not in output


# -- the worker process ---------------------------------------------------------------------

def run_in_thread(process: WorkerProcess) -> threading.Thread:
    thread = threading.Thread(target=process.run, daemon=True)
    thread.start()
    assert process.started.wait(10)
    return thread


def test_worker_process_burst_in_process(transactional_db):
    kathikon.insert_many([(workers.Succeed, {"n": i}) for i in range(25)])
    kathikon.insert(workers.Emails, {})
    process = WorkerProcess(node=NODE, burst=True, handle_signals=False, services=(),
                            poll_interval=0.1)
    assert process.run() == 0
    assert storage.count_by_state()["completed"] == 26
    assert process.completed == 26
    assert Node.objects.get(name=NODE).status == "stopped"


def test_worker_process_picks_up_started_queues(transactional_db):
    process = WorkerProcess(node=NODE, handle_signals=False, services=(), poll_interval=0.1)
    thread = run_in_thread(process)
    try:
        kathikon.start_queue("reports")
        job = kathikon.insert(workers.Succeed, {}, queue="reports")
        wait_until(lambda: kathikon.fetch(job.id).state == "completed", 10,
                   message="the job of the new queue ran")
        assert "reports" in process.dispatchers
    finally:
        process.stop()
        thread.join(10)


def test_worker_process_subset_and_row_concurrency(transactional_db):
    storage.ensure_queue("emails")
    from kathikon.models import Queue

    Queue.objects.filter(name="emails").update(concurrency=3)
    process = WorkerProcess(node=NODE, queues={"emails": None, "bulk": 7},
                            handle_signals=False, services=())
    assert process._queue_limits(storage.queue_rows()) == {"emails": 3, "bulk": 7}
    everything = WorkerProcess(node=NODE, handle_signals=False, services=())
    assert everything._queue_limits(storage.queue_rows()) == {"default": 10, "emails": 3}


def test_worker_process_survives_a_job_calling_sys_exit(transactional_db):
    exits = kathikon.insert("testproject.demo.workers.Exits", {})
    fine = kathikon.insert(workers.Succeed, {})
    process = WorkerProcess(node=NODE, queues={"default": 1}, burst=True, handle_signals=False,
                            services=(), poll_interval=0.1)
    assert process.run() == 0
    assert kathikon.fetch(exits.id).state == "dead"
    assert kathikon.fetch(fine.id).state == "completed"


def test_worker_process_starts_every_service(transactional_db):
    process = WorkerProcess(node=NODE, burst=True, handle_signals=False, poll_interval=0.1)
    assert process.run() == 0
    assert [type(service).__name__ for service in process.services] == [
        "Heartbeat", "Promoter", "Pruner", "Lifeline", "CronScheduler"]
    assert not any(service.running for service in process.services)  # stopped at shutdown


def test_worker_listener_reconnects_after_its_backend_is_terminated(transactional_db,
                                                                    postgres_only):
    from django.db import connection

    from kathikon.runtime.listener import Listener

    connects: list[int] = []
    reconnected = threading.Event()

    def on_connect() -> None:
        connects.append(1)
        if len(connects) == 2:
            reconnected.set()

    listener = Listener(storage.alias(), lambda event, queue: None, on_connect,
                        max_backoff=0.2).start()
    try:
        assert listener.connected.wait(5)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                           "datname = current_database() AND query = 'LISTEN kathikon'")
        assert reconnected.wait(10)
    finally:
        listener.stop()
        assert listener.join(5)
