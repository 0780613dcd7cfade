"""Workflows under real ``kathikon_worker`` processes, on SQLite, PostgreSQL and MariaDB.

- A diamond (1 → 500 in parallel → 1) and a 10,000-wide fan-in under 4 processes: the
  last step runs exactly once, after every one of its deps completed, never before.
- ``kill -9`` of a worker in the middle of a workflow: every step still runs, once per
  attempt (a rescue gives a run back), and the workflow finishes.
- Failure policies, the cancel of a running workflow, a retried dead step that continues
  its workflow and ``append`` to a running workflow, each with real workers.

Every step records its runs (``tests.workflows.steps.Witness``); "after its deps" is
checked by the step itself when it starts (``early``: deps without a result).
"""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import DatabaseError, connection

import kathikon
from kathikon import Workflow
from kathikon.models import Job, JobEvent
from kathikon.models import Workflow as WorkflowRow
from tests.runtime.conftest import wait_until
from tests.workflows.steps import Witness, runs

# RESCUE_AFTER is long where no process is killed: under 4 processes on SQLite a heartbeat
# can wait seconds for the writer lock, and on MariaDB an acker writes completions with
# results one statement each, so a 2,000-job batch may take longer than 3 s; either would
# (rightly) get a busy node presumed dead and its jobs rescued, which is not what these
# tests are about. The kill test keeps 3 s: its load is light and it needs the rescue.
SETTINGS = {
    "HEARTBEAT_INTERVAL": 0.5,
    "RESCUE_AFTER": 20.0,
    "POLL_INTERVAL": 0.2,
    "SCHEDULER_INTERVAL": 0.5,
    "SHUTDOWN_GRACE_PERIOD": 5,
    "QUEUES": {"default": {"concurrency": 10}},
}
KILL_SETTINGS = {**SETTINGS, "RESCUE_AFTER": 3.0}

pytestmark = pytest.mark.slow


def status(wf: Workflow) -> str:
    return WorkflowRow.objects.get(pk=wf.id).status


def finished(wf: Workflow) -> bool:
    return status(wf) != "running"


def states(wf: Workflow) -> Counter[str]:
    return Counter(Job.objects.filter(workflow_id=wf.id).values_list("state", flat=True))


def fan(log: Path, width: int, name: str, **step_args: Any) -> Workflow:
    """root → ``width`` steps in parallel → end (which checks its deps had all completed)."""
    wf = Workflow(name)
    wf.add("root", Witness, {"log": str(log)})
    middle = [wf.add(f"m{i}", Witness, {"log": str(log), **step_args}, deps=["root"])
              for i in range(width)]
    wf.add("end", Witness, {"log": str(log), "check": True}, deps=middle)
    return wf.insert()


def fan_in(log: Path, width: int) -> Workflow:
    """``width`` independent steps → one step that waits for all of them."""
    wf = Workflow("fan-in")
    deps = [wf.add(f"d{i}", Witness, {"log": str(log)}) for i in range(width)]
    wf.add("end", Witness, {"log": str(log), "check": True}, deps=deps)
    return wf.insert()


def assert_ran_once_after_all(log: Path, wf: Workflow, total: int) -> None:
    """Every step ran, none twice unless a rescue gave it back (a node killed or exited for
    a stall, as a loaded machine can cause: recorded, never silent), and the last step
    exactly once, after all its deps."""
    recorded = runs(log)
    per_job = Counter(job for job, _, _, _ in recorded)
    assert len(per_job) == total, f"{total - len(per_job)} steps never ran"
    rescued = Counter(JobEvent.objects.filter(kind="rescued").values_list("job_id", flat=True))
    silent = {job: n for job, n in per_job.items() if n > 1 + rescued[uuid.UUID(job)]}
    assert not silent, (f"{len(silent)} steps run more than once without a rescue, e.g. "
                        f"{dict(list(silent.items())[:5])}")
    if rescued:
        sample = Job.objects.get(pk=next(iter(rescued)))
        print(f"{sum(rescued.values())} rescues, the first one's errors: {sample.errors}")
    [end] = [row for row in recorded if row[1] == "end"]
    assert end[3] == 0, f"the last step started while {end[3]} of its deps had not completed"
    assert states(wf) == Counter({"completed": total})
    assert status(wf) == "completed"


def test_a_diamond_runs_its_last_step_once_after_all_500(worker_processes, tmp_path):
    log = tmp_path / "runs.log"
    wf = fan(log, 500, "diamond")
    worker_processes.start_many(4, settings=SETTINGS)
    wait_until(lambda: finished(wf), timeout=120, interval=0.2,
               message="the diamond to finish")
    assert_ran_once_after_all(log, wf, 502)


def test_a_10000_wide_fan_in_is_released_exactly_once(worker_processes, tmp_path):
    log = tmp_path / "runs.log"
    wf = fan_in(log, 10_000)
    started = time.monotonic()
    worker_processes.start_many(4, settings=SETTINGS)
    wait_until(lambda: finished(wf), timeout=400, interval=0.5,
               message="the 10,000-wide fan-in to finish")
    print(f"10,001 steps under 4 processes in {time.monotonic() - started:.1f}s")
    assert_ran_once_after_all(log, wf, 10_001)


@pytest.fixture
def statistics_without_waiting_steps(postgres_only: None, transactional_db: Any) -> Iterator[None]:
    """The job table's statistics from an ANALYZE that saw only plain jobs waiting (a site
    before its first workflow); the table's own statistics are dropped again afterwards."""
    kathikon.insert_many([(Witness, {"log": "/dev/null"}) for _ in range(300)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE kathikon_job")
    Job.objects.all().delete()
    yield
    with connection.cursor() as cursor:  # none, as a new table has (the test server's
        # superuser may); else statistics of the table as the test left it
        try:
            cursor.execute("DELETE FROM pg_statistic WHERE starelid = 'kathikon_job'::regclass")
        except DatabaseError:
            cursor.execute("ANALYZE kathikon_job")


def test_a_wide_fan_out_is_released_at_once_whatever_the_statistics_say(
        statistics_without_waiting_steps, worker_processes, tmp_path):
    # With those statistics the settling statement once read the waiting steps by their
    # state index and unnested every released id again for each: the ack of the root
    # (141 s for 10,000 steps) outlived RESCUE_AFTER, the worker exited, the rescued root
    # ran and acked the same way again.
    log = tmp_path / "runs.log"
    wf = fan(log, 10_000, "stale-statistics")
    started = time.monotonic()
    worker_processes.start_many(2, settings=SETTINGS)
    wait_until(lambda: finished(wf), timeout=90, interval=0.5,
               message="the 10,000-wide fan-out to finish")
    print(f"10,002 steps under 2 processes in {time.monotonic() - started:.1f}s")
    assert not JobEvent.objects.filter(kind="rescued").exists()
    assert_ran_once_after_all(log, wf, 10_002)


def test_kill_9_in_the_middle_loses_and_doubles_no_step(worker_processes, tmp_path):
    log = tmp_path / "runs.log"
    wf = fan(log, 24, "killed", seconds=0.4)
    processes = worker_processes.start_many(2, settings=KILL_SETTINGS)
    busy = wait_until(lambda: Job.objects.filter(workflow_id=wf.id, state="running",
                                                 step__startswith="m")
                      .values_list("attempted_by", flat=True).first(),
                      timeout=30, message="a middle step to run")
    processes[int(busy.removeprefix("w"))].signal_group(signal.SIGKILL)
    worker_processes.start("--node", "w2", settings=KILL_SETTINGS)
    wait_until(lambda: finished(wf), timeout=90, interval=0.2, message="the workflow to finish")
    rescued = Counter(JobEvent.objects.filter(kind="rescued").values_list("job_id", flat=True))
    assert rescued, "the kill rescued nothing: it came too late to prove anything"
    per_job = Counter(job for job, _, _, _ in runs(log))
    for job in Job.objects.filter(workflow_id=wf.id):
        # once, plus once again per rescue of a run the kill cut short
        assert 1 <= per_job[job.id.hex] <= 1 + rescued[job.id], job.step
    assert_end_ran_once_after_all(log)
    assert states(wf) == Counter({"completed": 26})
    assert status(wf) == "completed"


def assert_end_ran_once_after_all(log: Path) -> None:
    ends = [row for row in runs(log) if row[1] == "end"]
    assert len(ends) == 1 and ends[0][3] == 0


def test_policies_cancel_retry_and_append_with_real_workers(worker_processes, tmp_path):
    log = str(tmp_path / "runs.log")
    wf = Workflow("policies")
    wf.add("bad", Witness, {"log": log, "fail_until": 99}, max_attempts=1)
    wf.add("ok", Witness, {"log": log, "seconds": 0.5})
    wf.add("cancelled", Witness, {"log": log}, deps=["bad"])
    wf.add("after", Witness, {"log": log}, deps=["cancelled"])
    wf.add("runs", Witness, {"log": log}, deps=["bad", "ok"], on_dep_failure="run")
    wf.add("held", Witness, {"log": log}, deps=["bad"], on_dep_failure="hold")
    wf.insert()
    worker_processes.start_many(2, settings=SETTINGS)

    def settled() -> bool:
        return states(wf) == Counter({"dead": 1, "completed": 2, "cancelled": 2, "held": 1})

    wait_until(settled, timeout=30, message="bad dead, its dependents cancelled and held")
    appended = Workflow.load(wf.id).append("late", Witness, {"log": log}, deps=["ok"])
    wait_until(lambda: Job.objects.get(pk=appended.pk).state == "completed", timeout=20,
               message="the appended step to run")
    # retrying the dead step continues the workflow: it fails again, so the fix is a
    # retry with more luck — here the worker is told to succeed through its args
    bad = Job.objects.get(workflow_id=wf.id, step="bad")
    Job.objects.filter(pk=bad.pk).update(args={"log": log})
    kathikon.retry(bad.pk)
    wait_until(lambda: finished(wf), timeout=30, message="the workflow to finish")
    assert states(wf) == Counter({"completed": 7})
    assert status(wf) == "completed"

    running = Workflow("cancel-me")
    running.add("slow", Witness, {"log": log, "seconds": 2})
    running.add("next", Witness, {"log": log}, deps=["slow"])
    running.add("other", Witness, {"log": log}, deps=["next"], schedule_in=3600)
    running.insert()
    wait_until(lambda: Job.objects.filter(workflow_id=running.id, step="slow",
                                          state="running").exists(),
               timeout=20, message="the slow step to start")
    kathikon.workflows.cancel(running.id)
    assert states(running)["cancelled"] == 2
    wait_until(lambda: finished(running), timeout=20, message="the running step to finish")
    assert Job.objects.get(workflow_id=running.id, step="slow").state == "completed"
    assert status(running) == "cancelled"
