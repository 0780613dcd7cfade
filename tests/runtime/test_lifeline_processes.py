"""The lifeline with real ``kathikon_worker`` processes: kill -9 and SIGSTOP of a worker."""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import kathikon
from kathikon import storage
from kathikon.models import Job, JobEvent, Node
from kathikon.storage.rescue import ERROR_KIND
from tests.runtime.conftest import wait_until
from tests.runtime.lifeline_workers import SlowRecorded, executions

HEARTBEAT_INTERVAL = 0.5
RESCUE_AFTER = 3.0
SETTINGS = {
    "HEARTBEAT_INTERVAL": HEARTBEAT_INTERVAL,
    "RESCUE_AFTER": RESCUE_AFTER,
    "POLL_INTERVAL": 0.2,
    "SCHEDULER_INTERVAL": 0.5,
    "SHUTDOWN_GRACE_PERIOD": 5,
    "QUEUES": {"default": {"concurrency": 4}},
}


def insert_slow(log: Path, count: int, seconds: float) -> list[str]:
    result = kathikon.insert_many(
        [(SlowRecorded, {"log": str(log), "seconds": seconds, "i": i}) for i in range(count)])
    assert result.inserted == count and not result.errors
    return [getattr(job_id, "hex", job_id) for job_id in result.ids]


def start_ready(worker_processes: Any, count: int) -> list[Any]:
    """``count`` workers ``w0``… that have all logged their start-up banner."""
    workers = worker_processes.start_many(count, settings=SETTINGS)
    for index, worker in enumerate(workers):
        worker.wait_for_log(f"kathikon worker w{index} running", timeout=30)
    return workers


def started_by(log: Path, node: str) -> bool:
    return any(row[1] == node and row[3] == "start" for row in executions(log))


def all_completed(count: int) -> bool:
    return storage.count_by_state()["completed"] == count


def node_status(name: str) -> str:
    return Node.objects.get(name=name).status


def snapshot() -> dict[str, tuple[Any, ...]]:
    return {job.id.hex: (job.state, job.lease, job.attempts, job.attempted_by, job.result,
                         job.errors, job.completed_at)
            for job in Job.objects.all()}


@pytest.mark.slow
def test_kill_9_of_one_worker_of_three_rescues_its_jobs_only(worker_processes: Any,
                                                            tmp_path: Path):
    log = tmp_path / "executions.log"
    victim, *_ = start_ready(worker_processes, 3)
    ids = insert_slow(log, 24, seconds=1.5)  # 3 workers x 4 slots: every worker gets some
    wait_until(lambda: started_by(log, "w0"), timeout=20, message="w0 to start a job")

    killed_at = storage.db_now()
    victim.kill()  # SIGKILL: no shutdown, no release, no last heartbeat
    held = {job.id.hex for job in storage.held_jobs("w0")}
    assert held, "the victim held no job when it was killed"

    wait_until(lambda: all_completed(len(ids)), timeout=RESCUE_AFTER + 20,
               message="every job to complete")

    starts = Counter(row[0] for row in executions(log) if row[3] == "start")
    assert set(starts) == set(ids)  # every job ran
    ran_twice = {job for job, count in starts.items() if count > 1}
    assert max(starts.values()) <= 2
    by_w0 = {(row[0], row[3]) for row in executions(log) if row[1] == "w0"}
    interrupted = {job for job, event in by_w0 if event == "start"} - {
        job for job, event in by_w0 if event == "end"}
    assert interrupted and interrupted <= ran_twice  # cut short by the kill, then run again

    # A claim statement still in flight at the kill may commit a moment later: the jobs
    # rescued are those held at the kill, perhaps plus such a claim, and all were w0's.
    rescues = list(JobEvent.objects.filter(kind="rescued"))
    rescued = {event.job_id.hex for event in rescues}
    assert held <= rescued and len(rescues) == len(rescued)  # each rescued once
    assert {event.data["node"] for event in rescues} == {"w0"}
    assert ran_twice <= rescued  # only jobs the dead node held ran twice
    for job in Job.objects.filter(id__in=[event.job_id for event in rescues]):
        assert job.state == "completed" and job.attempted_by in ("w1", "w2")
        assert [e["kind"] for e in job.errors] == [ERROR_KIND]
        assert "node w0" in job.errors[0]["message"]
    # Its row no longer says running: a lifeline recorded it as crashed (issue 26, 6b).
    assert node_status("w0") == "crashed"
    assert node_status("w1") == node_status("w2") == "running"
    rescue_seconds = max((event.at - killed_at).total_seconds() for event in rescues)
    sys.stderr.write(f"\nrescue time after kill -9: {rescue_seconds:.2f}s "
                     f"(RESCUE_AFTER={RESCUE_AFTER}s, HEARTBEAT_INTERVAL={HEARTBEAT_INTERVAL}s)\n")
    assert rescue_seconds <= RESCUE_AFTER + 4


@pytest.mark.slow
def test_a_worker_frozen_past_rescue_after_has_its_late_acks_refused(worker_processes: Any,
                                                                     tmp_path: Path):
    log = tmp_path / "executions.log"
    frozen, _ = start_ready(worker_processes, 2)
    ids = insert_slow(log, 8, seconds=1.0)  # 2 workers x 4 slots: both workers get some
    wait_until(lambda: started_by(log, "w0"), timeout=20, message="w0 to start a job")

    frozen.signal_group(signal.SIGSTOP)
    try:
        held = {job.id.hex for job in storage.held_jobs("w0")}
        assert held, "the frozen worker held no job"
        wait_until(lambda: all_completed(len(ids)), timeout=RESCUE_AFTER + 20,
                   message="every job to complete while w0 is frozen")
        before = snapshot()
        assert node_status("w0") == "crashed"  # recorded by w1's lifeline (issue 26, 6b)
    finally:
        frozen.signal_group(signal.SIGCONT)
    # It was only frozen: its own next heartbeat says it runs again (it was not taken over).
    wait_until(lambda: node_status("w0") == "running", timeout=15,
               message="w0's heartbeat after the freeze")

    # Awake again: its jobs finish their sleep and it acknowledges them, too late.
    wait_until(lambda: all(any(r[0] == job and r[1] == "w0" and r[3] == "end"
                               for r in executions(log)) for job in held),
               timeout=15, message="w0's frozen jobs to return")
    frozen.signal(signal.SIGTERM)  # a graceful exit flushes every pending acknowledgement
    assert frozen.wait(timeout=15) == 0
    assert node_status("w0") == "stopped"

    assert snapshot() == before  # the late acknowledgements changed nothing
    output = frozen.log()
    for job_hex in held:
        assert f"ack of job {job_hex} fenced off" in output
    assert "node w0 was silent for" in output  # its heartbeat noticed the freeze
    for job in Job.objects.filter(id__in=[uuid.UUID(h) for h in held]):
        assert job.state == "completed" and job.attempted_by == "w1"
        assert job.result == {"node": "w1", "attempt": job.attempts}
        assert [e["kind"] for e in job.errors] == [ERROR_KIND]
    rescues = list(JobEvent.objects.filter(kind="rescued"))
    assert held <= {event.job_id.hex for event in rescues}
    assert {event.data["node"] for event in rescues} == {"w0"}


@pytest.mark.slow
def test_a_restarted_child_rescues_its_predecessors_jobs_at_once(worker_processes: Any,
                                                                tmp_path: Path):
    """``--processes 2 --node pool``: kill -9 of child ``pool-1``; the supervisor restarts it
    under the same name and, registering, it rescues what its predecessor held — long
    before RESCUE_AFTER (60 s here) would have."""
    log = tmp_path / "executions.log"
    settings = {**SETTINGS, "RESCUE_AFTER": 60}
    pool = worker_processes.start("--processes", "2", "--node", "pool", settings=settings)
    for name in ("pool-1", "pool-2"):
        pool.wait_for_log(f"kathikon worker {name} running", timeout=30)
    ids = insert_slow(log, 8, seconds=1.0)
    wait_until(lambda: started_by(log, "pool-1"), timeout=20, message="pool-1 to start a job")
    node = storage.fetch_node("pool-1")
    assert node is not None and node.pid

    killed_at = storage.db_now()
    os.kill(node.pid, signal.SIGKILL)
    held = {job.id.hex for job in storage.held_jobs("pool-1")}
    assert held

    wait_until(lambda: all_completed(len(ids)), timeout=25, message="every job to complete")
    rescues = list(JobEvent.objects.filter(kind="rescued"))
    assert held <= {event.job_id.hex for event in rescues}
    assert {event.data["node"] for event in rescues} == {"pool-1"}
    assert all("restarted" in Job.objects.get(id=event.job_id).errors[0]["message"]
               for event in rescues)
    rescue_seconds = max((event.at - killed_at).total_seconds() for event in rescues)
    sys.stderr.write(f"\nrescue time after kill -9 of a --processes child: "
                     f"{rescue_seconds:.2f}s (restarted under its name)\n")
    assert rescue_seconds < 15
