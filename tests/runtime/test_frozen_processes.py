"""A job that holds the GIL freezes every thread of its process: real processes, PostgreSQL.

Its timeout cannot fire and its heartbeat stops. Without a process outside it, the
lifeline of another node rescues the job after ``RESCUE_AFTER`` and a second process
runs it while the first still does. Here the supervisor (``--processes``) or, for a
single process, its watchdog kills the frozen process first:

- the frozen job never runs in two processes at once (an ``flock`` held by each run
  tells), it is charged as a crash suspect and ends dead after ``CRASH_LIMIT`` crashes
  while running alone, and every control job completes;
- SIGTERM stops a supervisor whose child is frozen within the grace period, and the job
  is not lost: the next start under the same node names rescues and runs it;
- a single process frozen is killed by its watchdog before its heartbeat is
  ``RESCUE_AFTER`` old, and the watchdog ends with it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import kathikon
from kathikon.models import Job
from kathikon.states import EXECUTING_STATES
from kathikon.storage.rescue import CRASH_KIND, CRASH_LIMIT, ERROR_KIND
from tests.runtime.conftest import wait_until
from tests.runtime.lifeline_workers import SlowRecorded, executions
from tests.runtime.node_workers import HoldsTheGil
from tests.runtime.test_faults_nodes import SETTINGS

FAST = SETTINGS  # stall limit (RESCUE_AFTER - HEARTBEAT_INTERVAL) / 2 = 1.25 s
SLOW = {**FAST, "HEARTBEAT_INTERVAL": 5, "RESCUE_AFTER": 60}  # stall limit 27.5 s
FREEZE = 20  # seconds a run holds the GIL: far past RESCUE_AFTER in FAST
pytestmark = [pytest.mark.usefixtures("postgres_only"), pytest.mark.slow]


def insert_frozen(tmp_path: Path, **args: Any) -> kathikon.Job:
    return kathikon.insert(HoldsTheGil, {"log": str(tmp_path / "runs.log"),
                                         "lock": str(tmp_path / "frozen.lock"),
                                         "seconds": FREEZE, **args}, priority=10)


def insert_controls(tmp_path: Path, count: int = 14) -> list[str]:
    result = kathikon.insert_many(
        [(SlowRecorded, {"log": str(tmp_path / "runs.log"), "seconds": 0.2, "i": i},
          {"max_attempts": 1}) for i in range(count)])
    assert result.inserted == count and not result.errors
    return [getattr(job_id, "hex", job_id) for job_id in result.ids]


def runs_of(tmp_path: Path, job: kathikon.Job) -> Counter[str]:
    return Counter(event for hex_, _node, _attempt, event in executions(tmp_path / "runs.log")
                   if hex_ == job.id.hex)


def completed(ids: list[str]) -> bool:
    return Job.objects.filter(id__in=ids, state="completed").count() == len(ids)


def started(tmp_path: Path, job: kathikon.Job) -> bool:
    return runs_of(tmp_path, job)["start"] >= 1


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_frozen_child_is_killed_before_its_job_runs_twice_and_the_job_ends_dead(
        worker_processes: Any, tmp_path: Path):
    frozen = insert_frozen(tmp_path)
    controls = insert_controls(tmp_path)
    began = time.monotonic()
    pool = worker_processes.start("--processes", "2", "--node", "pool", settings=FAST)

    wait_until(lambda: Job.objects.get(id=frozen.id).state == "dead", timeout=90,
               interval=0.2, message="the frozen job to end dead")
    wait_until(lambda: completed(controls), timeout=30, message="every control job")
    wait_until(lambda: not Job.objects.filter(state__in=EXECUTING_STATES).exists(),
               timeout=10, message="nothing claimed or running")

    runs = runs_of(tmp_path, frozen)
    assert runs["overlap"] == 0, "the frozen job ran in two processes at once"
    assert runs["end"] == 0 and runs["start"] == CRASH_LIMIT + 1  # every run was killed
    row = Job.objects.get(id=frozen.id)
    assert row.crashes == CRASH_LIMIT and not row.suspect
    assert [e["kind"] for e in row.errors] == [ERROR_KIND] + [CRASH_KIND] * CRASH_LIMIT
    log = pool.log()
    assert log.count("has not run for") == CRASH_LIMIT + 1
    assert "a job holding the GIL" in log
    assert pool.returncode is None  # the supervisor goes on serving
    fresh = insert_controls(tmp_path, 3)
    wait_until(lambda: completed(fresh), timeout=20, message="new jobs to complete")
    sys.stderr.write(f"\nfrozen job dead after {time.monotonic() - began:.1f}s, "
                     f"{CRASH_LIMIT + 1} runs, none at once\n")


def test_sigterm_stops_a_supervisor_with_a_frozen_child_within_the_grace_period(
        worker_processes: Any, tmp_path: Path):
    frozen = insert_frozen(tmp_path, once=str(tmp_path / "froze-once"))
    controls = insert_controls(tmp_path)
    pool = worker_processes.start("--processes", "2", "--node", "pool", settings=SLOW)
    wait_until(lambda: started(tmp_path, frozen), timeout=30, message="the job to freeze")
    time.sleep(0.5)
    asked = time.monotonic()
    pool.signal(signal.SIGTERM)
    pool.wait(timeout=SLOW["SHUTDOWN_GRACE_PERIOD"])
    took = time.monotonic() - asked
    assert took < SLOW["SHUTDOWN_GRACE_PERIOD"]
    assert "after a stop signal" in pool.log()
    wait_until(lambda: group_gone(pool.pid), timeout=5, message="every child to exit")

    # Not lost: the next start under the same names rescues the frozen job (its process
    # is dead) and runs it; it no longer freezes.
    again = worker_processes.start("--processes", "2", "--node", "pool", settings=SLOW)
    wait_until(lambda: Job.objects.get(id=frozen.id).state == "completed", timeout=30,
               message="the rescued job to complete")
    wait_until(lambda: completed(controls), timeout=30, message="every control job")
    runs = runs_of(tmp_path, frozen)
    assert runs["overlap"] == 0 and runs["start"] == 2 and runs["end"] == 1
    row = Job.objects.get(id=frozen.id)
    assert row.attempts == 1 and row.errors[-1]["kind"] == ERROR_KIND
    again.signal(signal.SIGTERM)
    assert again.wait(timeout=SLOW["SHUTDOWN_GRACE_PERIOD"] + 5) == 0
    sys.stderr.write(f"\nsupervisor with a frozen child stopped {took:.1f}s after SIGTERM\n")


def test_a_single_frozen_process_is_killed_by_its_watchdog_before_a_rescue(
        worker_processes: Any, tmp_path: Path):
    frozen = insert_frozen(tmp_path, once=str(tmp_path / "froze-once"))
    controls = insert_controls(tmp_path)
    solo = worker_processes.start("--node", "solo", settings=FAST)
    wait_until(lambda: started(tmp_path, frozen), timeout=30, message="the job to freeze")
    froze = time.monotonic()
    assert solo.wait(timeout=10) == -signal.SIGKILL
    killed_after = time.monotonic() - froze
    assert killed_after < FAST["RESCUE_AFTER"] - FAST["HEARTBEAT_INTERVAL"]
    assert "kathikon watchdog: worker process" in solo.log()
    wait_until(lambda: group_gone(solo.pid), timeout=5, message="the watchdog to exit")

    again = worker_processes.start("--node", "solo", settings=FAST)
    wait_until(lambda: Job.objects.get(id=frozen.id).state == "completed", timeout=30,
               message="the rescued job to complete")
    wait_until(lambda: completed(controls), timeout=30, message="every control job")
    runs = runs_of(tmp_path, frozen)
    assert runs["overlap"] == 0 and runs["start"] == 2 and runs["end"] == 1
    again.signal(signal.SIGTERM)
    assert again.wait(timeout=FAST["SHUTDOWN_GRACE_PERIOD"] + 5) == 0
    wait_until(lambda: group_gone(again.pid), timeout=5, message="the watchdog to exit")
    sys.stderr.write(f"\nwatchdog killed the frozen worker {killed_after:.1f}s after the "
                     "freeze\n")


def test_sigterm_to_a_frozen_single_process_group_ends_it_within_the_grace_period(
        worker_processes: Any, tmp_path: Path):
    frozen = insert_frozen(tmp_path)
    solo = worker_processes.start("--node", "solo", settings=SLOW)
    wait_until(lambda: started(tmp_path, frozen), timeout=30, message="the job to freeze")
    asked = time.monotonic()
    solo.signal_group(signal.SIGTERM)  # what a terminal's Ctrl-C or systemd does
    assert solo.wait(timeout=SLOW["SHUTDOWN_GRACE_PERIOD"]) == -signal.SIGKILL
    assert time.monotonic() - asked < SLOW["SHUTDOWN_GRACE_PERIOD"]
    assert "after a stop signal" in solo.log()
    wait_until(lambda: group_gone(solo.pid), timeout=5, message="the watchdog to exit")
