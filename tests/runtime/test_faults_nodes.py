"""Fault tests with real ``kathikon_worker`` processes: poison pills and shared node names.

- A job that kills its process (``os._exit``, SIGKILL) is inserted before ordinary jobs
  (``max_attempts=1``): the ordinary ones complete exactly once and are not charged, the
  poison ends dead saying it crashed its worker ``CRASH_LIMIT`` times, nothing stays
  executing, and the supervised worker still serves new jobs.
- Two workers given one ``--node``: the second is refused (non-zero exit), started at the
  same moment exactly one runs, nobody's jobs are rescued or run twice, and a process whose
  name was taken over while it was frozen stops without touching the new holder's jobs.
"""

from __future__ import annotations

import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import kathikon
from kathikon import storage
from kathikon.models import Job, JobEvent, Node
from kathikon.runtime.supervisor import EXIT_NODE_IN_USE
from kathikon.states import EXECUTING_STATES
from kathikon.storage.rescue import CRASH_KIND, CRASH_LIMIT, ERROR_KIND
from tests.runtime.conftest import wait_until
from tests.runtime.lifeline_workers import SlowRecorded, executions
from tests.runtime.node_workers import Poison

SETTINGS = {
    "HEARTBEAT_INTERVAL": 0.5,
    "RESCUE_AFTER": 3.0,
    "POLL_INTERVAL": 0.2,
    "SCHEDULER_INTERVAL": 0.5,
    "SHUTDOWN_GRACE_PERIOD": 5,
    "QUEUES": {"default": {"concurrency": 4}},
}
# PostgreSQL only: what these runs prove is the processes' side (a child that dies, the
# supervisor restarting it, a process refused or superseded by its node name), which does
# not depend on the database. The SQL under it (crash suspects, quarantine claims, the
# culprit's charge; exclusive registration and take-over) runs on SQLite, PostgreSQL and
# MariaDB in test_crash_budget.py and test_node_names.py. Each run here is 1-14 s of
# real processes; three databases would triple that for nothing more proved.
pytestmark = pytest.mark.usefixtures("postgres_only")

POISON_BOUND = 60  # seconds: CRASH_LIMIT + 1 crashes, restart delays 1+2+5+10 s at worst


def insert_ordinary(log: Path, count: int, seconds: float, **options: Any) -> list[str]:
    result = kathikon.insert_many(
        [(SlowRecorded, {"log": str(log), "seconds": seconds, "i": i}, options)
         for i in range(count)])
    assert result.inserted == count and not result.errors
    return [getattr(job_id, "hex", job_id) for job_id in result.ids]


def state_of(job_hex: str) -> str:
    return Job.objects.get(id=job_hex).state


def executing() -> int:
    return Job.objects.filter(state__in=EXECUTING_STATES).count()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_a_poison_pill_ends_dead_and_its_neighbours_are_not_charged(worker_processes: Any,
                                                                    tmp_path: Path, how: str):
    log = tmp_path / "executions.log"
    poison = kathikon.insert(Poison, {"log": str(log), "how": how, "after": 0.3})
    ordinary = insert_ordinary(log, 10, seconds=0.6, max_attempts=1)
    started = time.monotonic()
    pool = worker_processes.start("--processes", "2", "--node", "pool", settings=SETTINGS)

    wait_until(lambda: state_of(poison.id.hex) == "dead", timeout=POISON_BOUND,
               message="the poison to end dead")
    dead_after = time.monotonic() - started
    wait_until(lambda: all(state_of(job) == "completed" for job in ordinary), timeout=30,
               message="every ordinary job to complete")
    wait_until(lambda: executing() == 0, timeout=10, message="nothing claimed or running")

    ended = Counter(row[0] for row in executions(log) if row[3] == "end")
    assert all(ended[job] == 1 for job in ordinary)  # each completed exactly once
    rescued_neighbours = 0
    for job in Job.objects.filter(id__in=ordinary):
        assert (job.state, job.attempts, job.max_attempts, job.crashes) == ("completed", 1, 1, 0)
        if job.errors:  # it shared the poison's process: rescued, not charged, run alone
            rescued_neighbours += 1
            assert {e["kind"] for e in job.errors} == {ERROR_KIND}
            assert all("the attempt does not count" in e["message"] for e in job.errors)
    assert rescued_neighbours >= 1, "the poison shared its process with no ordinary job"

    row = Job.objects.get(id=poison.id)
    assert row.state == "dead" and row.crashes == CRASH_LIMIT and not row.suspect
    assert row.errors[-1]["kind"] == CRASH_KIND
    assert f"crashed its worker {CRASH_LIMIT} times" in row.errors[-1]["message"]
    assert [e["kind"] for e in row.errors] == [ERROR_KIND] + [CRASH_KIND] * CRASH_LIMIT
    runs = [r for r in executions(log) if r[0] == poison.id.hex and r[3] == "start"]
    assert len(runs) == CRASH_LIMIT + 1  # once beside others, then alone until the limit
    assert "running crash suspect" in pool.log()
    rescues = JobEvent.objects.filter(kind="rescued")
    assert {e.data["node"] for e in rescues} <= {"pool-1", "pool-2"}

    # The supervised worker still serves new jobs.
    fresh = insert_ordinary(log, 3, seconds=0.1)
    wait_until(lambda: all(state_of(job) == "completed" for job in fresh), timeout=20,
               message="new jobs to complete")
    assert pool.returncode is None
    sys.stderr.write(f"\npoison ({how}) dead after {dead_after:.1f}s; "
                     f"{rescued_neighbours} neighbour(s) rescued without charge\n")


@pytest.mark.slow
def test_a_second_worker_with_a_live_workers_node_name_is_refused(worker_processes: Any,
                                                                   tmp_path: Path):
    log = tmp_path / "executions.log"
    first = worker_processes.start("--node", "same", settings=SETTINGS)
    first.wait_for_log("kathikon worker same running", timeout=30)
    ids = insert_ordinary(log, 12, seconds=0.5)
    second = worker_processes.start("--node", "same", settings=SETTINGS)
    assert second.wait(timeout=30) == EXIT_NODE_IN_USE
    assert "node name 'same' is held by a live worker process" in second.log()
    assert "kathikon worker same running" not in second.log()

    wait_until(lambda: all(state_of(job) == "completed" for job in ids), timeout=30,
               message="every job to complete")
    # The refused process stopped: nothing of the live one's is rescued, even after the
    # rescue delay, and every job ran exactly once.
    more = insert_ordinary(log, 4, seconds=SETTINGS["RESCUE_AFTER"] + 1.5)
    wait_until(lambda: all(state_of(job) == "completed" for job in more), timeout=30,
               message="the long jobs to complete")
    starts = Counter(row[0] for row in executions(log) if row[3] == "start")
    assert set(starts) == set(ids + more) and set(starts.values()) == {1}
    assert not JobEvent.objects.filter(kind="rescued").exists()
    node = Node.objects.get(name="same")
    assert node.status == "running" and node.pid == first.pid
    first.signal(signal.SIGTERM)
    assert first.wait(timeout=20) == 0


@pytest.mark.slow
def test_two_workers_starting_at_once_with_one_node_name_one_runs(worker_processes: Any,
                                                                  tmp_path: Path):
    log = tmp_path / "executions.log"
    ids = insert_ordinary(log, 8, seconds=0.3)
    workers = [worker_processes.start("--node", "twin", settings=SETTINGS) for _ in range(2)]
    refused = wait_until(lambda: [w for w in workers if w.returncode is not None],
                         timeout=30, message="one of the twins to be refused")
    assert len(refused) == 1 and refused[0].returncode == EXIT_NODE_IN_USE
    (running,) = [w for w in workers if w is not refused[0]]
    running.wait_for_log("kathikon worker twin running", timeout=30)
    wait_until(lambda: all(state_of(job) == "completed" for job in ids), timeout=30,
               message="every job to complete")
    starts = Counter(row[0] for row in executions(log) if row[3] == "start")
    assert set(starts.values()) == {1}
    assert not JobEvent.objects.filter(kind="rescued").exists()
    assert Node.objects.get(name="twin").pid == running.pid


@pytest.mark.slow
def test_a_frozen_worker_whose_name_was_taken_over_stops_and_leaves_the_new_one_alone(
        worker_processes: Any, tmp_path: Path):
    log = tmp_path / "executions.log"
    frozen = worker_processes.start("--node", "same", settings=SETTINGS)
    frozen.wait_for_log("kathikon worker same running", timeout=30)
    # The whole group, as a paused VM or container would be: a worker stopped alone is
    # killed by its watchdog (test_frozen_processes.py), which this test is not about.
    frozen.signal_group(signal.SIGSTOP)
    try:
        wait_until(lambda: (storage.db_now() - Node.objects.get(name="same").heartbeat_at)
                   .total_seconds() > SETTINGS["RESCUE_AFTER"] + 0.5, timeout=20,
                   message="the frozen worker's heartbeat to go stale")
        heir = worker_processes.start("--node", "same", settings=SETTINGS)
        heir.wait_for_log("kathikon worker same running", timeout=30)
        ids = insert_ordinary(log, 8, seconds=SETTINGS["RESCUE_AFTER"] + 1.0)
        wait_until(lambda: sum(1 for r in executions(log) if r[3] == "start") >= 4,
                   timeout=20, message="the heir to start jobs")
    finally:
        frozen.signal_group(signal.SIGCONT)
    # Awake, the old process learns from its heartbeat that the name is taken, and stops;
    # its shutdown marks nothing, so the heir's running jobs are not rescued.
    assert frozen.wait(timeout=30) == 1
    assert "was taken over by another process" in frozen.log()
    wait_until(lambda: all(state_of(job) == "completed" for job in ids), timeout=40,
               message="the heir to complete every job")
    starts = Counter(row[0] for row in executions(log) if row[3] == "start")
    assert set(starts.values()) == {1} and {r[1] for r in executions(log)} == {"same"}
    assert not JobEvent.objects.filter(kind="rescued").exists()
    node = Node.objects.get(name="same")
    assert node.status == "running" and node.pid == heir.pid
