"""What a running worker tells its user: successes at -v 2, retry times, what it leaves behind."""

from __future__ import annotations

import re

import pytest

import kathikon
from tests import workers

pytestmark = pytest.mark.slow

FAST = {"POLL_INTERVAL": 0.2, "SCHEDULER_INTERVAL": 0.2}


def test_burst_final_line_counts_jobs_left_in_unserved_queues(worker_processes):
    kathikon.insert(workers.Succeed, {})
    left = [kathikon.insert(workers.Succeed, {}, queue="reports")  # nobody serves "reports"
            for _ in range(2)]
    worker = worker_processes.start("--burst", settings=FAST)
    assert worker.wait(20) == 0, worker.log()
    final = [line for line in worker.log().splitlines() if "kathikon burst" in line][-1]
    assert "0 remaining" in final
    assert "2 due job(s) left in queues this worker does not serve: reports (2)" in final
    assert {kathikon.fetch(job.id).state for job in left} == {"available"}


def test_burst_final_line_says_nothing_when_nothing_is_left(worker_processes):
    kathikon.insert(workers.Succeed, {})
    worker = worker_processes.start("--burst", settings=FAST)
    assert worker.wait(20) == 0, worker.log()
    assert "left in queues" not in worker.log()


def test_successes_logged_at_verbosity_2_and_retries_say_when(worker_processes):
    done = kathikon.insert(workers.Succeed, {})
    failing = kathikon.insert(workers.Explode, {})
    worker = worker_processes.start("--burst", "-v", "2", settings=FAST)
    assert worker.wait(20) == 0, worker.log()
    log = worker.log()
    assert re.search(rf"kathikon job {done.id.hex} tests\.workers\.Succeed attempt 1/\d+ "
                     r"completed in \d+\.\d{3}s", log), log
    job = kathikon.fetch(failing.id)
    assert job.state == "retryable"
    due = job.available_at.strftime("%H:%M:%S")
    assert re.search(rf"kathikon job {failing.id.hex} .*boom 1 → retryable \(attempt 2 at "
                     rf"{due} UTC, in \d+\.\ds\)", log), log


def test_successes_not_logged_at_default_verbosity(worker_processes):
    done = kathikon.insert(workers.Succeed, {})
    worker = worker_processes.start("--burst", settings=FAST)
    assert worker.wait(20) == 0, worker.log()
    assert kathikon.fetch(done.id).state == "completed"
    assert done.id.hex not in worker.log()


def test_queues_tasks_declares_are_served_by_default(worker_processes):
    # testproject's TASKS declares "default" and "emails"; KATHIKON["QUEUES"] only "default".
    job = kathikon.insert(workers.Succeed, {}, queue="emails")
    worker = worker_processes.start("--burst", settings={**FAST, "QUEUES": {"default": {}}})
    assert worker.wait(20) == 0, worker.log()
    assert "queues: default (10), emails (10)" in worker.log()
    assert kathikon.fetch(job.id).state == "completed"


def test_a_queue_started_later_counts_as_served(worker_processes):
    from kathikon import report

    from .conftest import wait_until

    worker = worker_processes.start("--node", "late-queues", settings=FAST)
    worker.wait_for_log("kathikon worker late-queues running")
    assert "late" not in report.served_queues() and "default" in report.served_queues()
    kathikon.start_queue("late")
    wait_until(lambda: "late" in report.served_queues(), 10, message="node records 'late'")
    job = kathikon.insert(workers.Succeed, {}, queue="late")
    wait_until(lambda: kathikon.fetch(job.id).state == "completed", 10, message="late job ran")
    assert {s.name: s.status for s in report.queue_summary()}["late"] == "running"
