"""Whole-process tests: real ``kathikon_worker`` processes against the test database."""

from __future__ import annotations

import datetime as dt
import signal
import statistics
import time

import pytest
from django.db import connection
from django.db.models import Count

import kathikon
from kathikon import storage
from kathikon.models import Job, Node
from testproject.demo.models import Execution
from tests.runtime.lifeline_workers import SlowRecorded, executions

from .conftest import wait_until

pytestmark = pytest.mark.slow

RECORD = "testproject.demo.workers.Record"
SLOW = "testproject.demo.workers.Slow"
FAST = {"POLL_INTERVAL": 0.2, "SCHEDULER_INTERVAL": 0.2}


def executions_per_job() -> dict[str, int]:
    return dict(Execution.objects.values_list("job_id").annotate(n=Count("id")))


def complete_then_stop(workers: list, count: int, timeout: float) -> None:
    """Wait for ``count`` completed jobs, then SIGTERM each worker: each exits 0."""
    wait_until(lambda: Job.objects.filter(state="completed").count() == count, timeout,
               interval=0.25, message=f"{count} jobs completed")
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(20) == 0, worker.log()


def test_worker_burst_runs_everything_due_and_exits_0(worker_processes):
    result = kathikon.insert_many([(RECORD, {"n": i}) for i in range(50)])
    flaky = kathikon.insert("testproject.demo.workers.Flaky", {"failures": 2})
    later = kathikon.insert(RECORD, {}, schedule_in=3600)
    worker = worker_processes.start("--burst", settings=FAST)
    assert worker.wait(20) == 0, worker.log()
    assert Execution.objects.count() == 50
    assert Job.objects.filter(id__in=result.ids, state="completed").count() == 50
    flaky = kathikon.fetch(flaky.id)
    assert (flaky.state, flaky.attempts) == ("completed", 3)
    assert kathikon.fetch(later.id).state == "scheduled"  # not due: burst does not wait for it
    log = worker.log()
    assert "kathikon worker" in log and "queues: default (10), emails (5)" in log
    assert log.count("Flaky attempt") == 2  # one line per failed attempt
    assert Node.objects.get().status == "stopped"


def test_worker_processes_drain_without_double_runs(worker_processes, vendor):
    """PostgreSQL: 4 processes drain 4,000 jobs; MariaDB and SQLite: 2 processes."""
    processes, count = {"postgresql": (4, 4_000), "mysql": (2, 3_000)}.get(vendor, (2, 1_000))
    if vendor == "postgresql":  # one supervisor forking 4 children
        workers = [worker_processes.start("--processes", str(processes), "--node", "drain",
                                          settings=FAST)]
    else:  # separate processes
        workers = worker_processes.start_many(processes, settings=FAST)
    # every process is up before the jobs arrive, so that all of them compete for the jobs
    wait_until(lambda: sum(w.log().count("kathikon worker") for w in workers) >= processes, 30,
               message="every worker's banner")
    # The first jobs hold each process's threads for longer than a poll (the others are fast
    # and buffered): a process that wakes first cannot take the whole backlog alone.
    result = kathikon.insert_many([(RECORD, {"n": i, "sleep": 0.3} if i < 10 * processes
                                    else {"n": i}) for i in range(count)], chunk_size=2000)
    assert result.inserted == count
    complete_then_stop(workers, count, 60)
    runs = executions_per_job()
    assert len(runs) == count
    assert max(runs.values()) == 1, "a job ran twice"
    nodes = set(Execution.objects.values_list("node", flat=True).distinct())
    assert len(nodes) == processes, nodes  # every process took part


def test_worker_sigterm_lets_running_jobs_finish(worker_processes, tmp_path):
    log = tmp_path / "executions.log"
    jobs = [kathikon.insert(SlowRecorded, {"log": str(log), "seconds": 1.5}) for _ in range(8)]
    worker = worker_processes.start("--queues", "default:3", "--node", "term",
                                    settings={**FAST, "SHUTDOWN_GRACE_PERIOD": 10})
    # Started by an executor thread, not only claimed: a claimed job a thread has not
    # picked up yet is released at shutdown (its state is already 'running' in the table).
    wait_until(lambda: sum(row[3] == "start" for row in executions(log)) == 3, 15,
               message="three jobs started")
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0, worker.log()
    states = storage.count_by_state()
    # the running ones finished inside the grace period; nothing else started
    assert states["completed"] >= 3 and states["completed"] + states["available"] == 8, states
    ran = executions(log)
    assert sum(row[3] == "start" for row in ran) == states["completed"]
    assert sum(row[3] == "end" for row in ran) == states["completed"]
    assert all(job.attempts == 0 for job in Job.objects.filter(state="available"))
    assert Node.objects.get(name="term").status == "stopped"
    assert len(jobs) == 8


def test_worker_sigterm_releases_jobs_still_running_after_the_grace_period(worker_processes):
    job = kathikon.insert(SLOW, {"seconds": 30})
    worker = worker_processes.start("--node", "short-grace",
                                    settings={**FAST, "SHUTDOWN_GRACE_PERIOD": 0.5})
    wait_until(lambda: kathikon.fetch(job.id).state == "running", 15, message="job running")
    started = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0, worker.log()
    assert time.monotonic() - started < 5
    job = kathikon.fetch(job.id)
    assert (job.state, job.attempts) == ("available", 0)  # released, attempt restored
    assert "released" in worker.log()


def test_worker_timeout_fails_the_attempt_and_frees_the_slot(worker_processes):
    hangs = kathikon.insert("testproject.demo.workers.Hangs", {"seconds": 4})
    after = kathikon.insert(RECORD, {})
    worker = worker_processes.start("--burst", "--queues", "default:1", settings=FAST)
    assert worker.wait(15) == 0, worker.log()
    hangs = kathikon.fetch(hangs.id)
    assert hangs.state == "dead" and hangs.attempts == 2
    assert [e["kind"] for e in hangs.errors] == ["kathikon.JobTimeout"] * 2
    assert hangs.result is None  # the abandoned thread's late outcome was discarded
    assert kathikon.fetch(after.id).state == "completed"
    assert "timed out after 0.5s" in worker.log()


def test_worker_pause_stops_new_starts_and_resume_picks_up(worker_processes, vendor):
    jobs = [kathikon.insert(SLOW, {"seconds": 0.3}) for _ in range(30)]
    worker = worker_processes.start("--queues", "default:2", settings=FAST)
    wait_until(lambda: Execution.objects.count() >= 2, 15, message="first runs")
    kathikon.pause_queue("default")
    paused_at = storage.db_now()
    # immediately on PostgreSQL (the claim refuses a paused queue, NOTIFY or not); within
    # one poll interval elsewhere
    wait_until(lambda: not Job.objects.filter(state="running").exists(), 5,
               message="running jobs finished")
    time.sleep(0.6)  # three poll intervals: nothing new may start
    late = Job.objects.filter(started_at__gt=paused_at + dt.timedelta(seconds=0.05))
    assert not late.exists(), [(j.started_at, paused_at) for j in late]
    left = Job.objects.filter(state="available").count()
    assert left > 0
    kathikon.resume_queue("default")
    wait_until(lambda: Job.objects.filter(state="completed").count() == len(jobs), 20,
               message="all jobs completed after resume")
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0, worker.log()


def _listening() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                       " AND query = 'LISTEN kathikon'")
        return bool(cursor.fetchone()[0])


def pickup_latencies(count: int) -> list[float]:
    """Insert ``count`` jobs 50 ms apart into a worker that polls every 5 s; each one's
    seconds from insert to start, sorted."""
    time.sleep(0.3)  # the dispatchers' first claims are done; they now sleep 5 s
    ids = []
    for _ in range(count):
        ids.append(kathikon.insert(RECORD, {}).id)
        time.sleep(0.05)
    wait_until(lambda: Job.objects.filter(id__in=ids, state="completed").count() == count, 10,
               message="every job completed")
    return sorted((job.started_at - job.inserted_at).total_seconds()
                  for job in Job.objects.filter(id__in=ids))


def test_worker_pickup_latency_with_listen(worker_processes, postgres_only):
    worker = worker_processes.start(settings={"POLL_INTERVAL": 5, "SCHEDULER_INTERVAL": 5})
    worker.wait_for_log("kathikon worker")
    wait_until(_listening, 10, message="the LISTEN connection")
    latencies = pickup_latencies(10)
    median = statistics.median(latencies)
    print(f"pickup latency median {median * 1000:.1f} ms")
    assert median < 0.5, latencies  # polling alone would take up to 5 s
    assert max(latencies) < 2.5, latencies  # tolerant of a loaded CI machine
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0


def _terminate_other_backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        return int(cursor.fetchone()[0])


def test_worker_survives_pg_terminate_backend(worker_processes, postgres_only):
    count = 300
    kathikon.insert_many([(RECORD, {"sleep": 0.01}) for _ in range(count)])
    worker = worker_processes.start("--queues", "default:5", "--node", "terminated",
                                    settings=FAST)
    for round_ in range(1, 3):
        wait_until(lambda r=round_: Execution.objects.count() >= r * 60, 20,
                   message="progress before terminating")
        assert _terminate_other_backends() >= 1
    wait_until(lambda: Job.objects.filter(state="completed").count() == count, 30,
               message="every job completed after the terminations")
    assert len(executions_per_job()) == count
    assert not Job.objects.exclude(state="completed").exists()
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0, worker.log()
    assert "retrying" in worker.log() or "LISTEN connection lost" in worker.log()


def test_worker_supervisor_restarts_a_dead_child_and_forwards_sigterm(worker_processes):
    import os
    import re

    supervisor = worker_processes.start("--processes", "2", "--node", "sup", settings=FAST)
    wait_until(lambda: len(re.findall(r"started worker \d \(pid (\d+)\)", supervisor.log())) == 2,
               15, message="two children")
    first = [int(pid) for pid in re.findall(r"started worker \d \(pid (\d+)\)", supervisor.log())]
    wait_until(lambda: Node.objects.filter(name__in=["sup-1", "sup-2"]).count() == 2, 15,
               message="two node rows")
    os.kill(first[0], signal.SIGKILL)
    wait_until(lambda: "restarting" in supervisor.log(), 10, message="the restart")
    wait_until(lambda: len(re.findall(r"started worker \d", supervisor.log())) == 3, 15,
               message="the replacement child")
    job = kathikon.insert(RECORD, {})
    wait_until(lambda: kathikon.fetch(job.id).state == "completed", 10, message="a job runs")
    supervisor.signal(signal.SIGTERM)  # the supervisor only; it forwards to the children
    assert supervisor.wait(15) == 0, supervisor.log()
    assert supervisor.log().count("stopped") >= 2
    assert set(Node.objects.values_list("status", flat=True)) == {"stopped"}


def test_worker_second_signal_exits_at_once(worker_processes, tmp_path):
    log = tmp_path / "executions.log"
    job = kathikon.insert(SlowRecorded, {"log": str(log), "seconds": 30})
    worker = worker_processes.start("--node", "impatient",
                                    settings={**FAST, "SHUTDOWN_GRACE_PERIOD": 60})
    # Started by an executor thread, not only claimed (a claimed job that no thread has
    # picked up yet is released at the first signal, and the worker exits 0 at once).
    wait_until(lambda: executions(log), 15, message="the job started")
    worker.signal(signal.SIGTERM)
    worker.wait_for_log("shutting down")
    time.sleep(1.2)  # a second signal this soon after the first counts as a duplicate
    worker.signal(signal.SIGTERM)
    assert worker.wait(5) == 1
    assert kathikon.fetch(job.id).state == "running"  # left for the lifeline to rescue
    assert "exiting now" in worker.log()


def test_worker_burst_runs_scheduled_jobs_that_come_due_while_it_runs(worker_processes):
    slow = kathikon.insert(SLOW, {"seconds": 2})
    soon = kathikon.insert(RECORD, {}, schedule_in=1)
    worker = worker_processes.start("--burst", settings={"POLL_INTERVAL": 5,
                                                          "SCHEDULER_INTERVAL": 5})
    assert worker.wait(20) == 0, worker.log()
    assert kathikon.fetch(slow.id).state == "completed"
    assert kathikon.fetch(soon.id).state == "completed"  # promoted by the burst itself
