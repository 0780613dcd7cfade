"""Whole-process tests: real ``kathikon_worker`` processes against the test database."""

from __future__ import annotations

import signal

import pytest

import kathikon
from kathikon.models import Job
from testproject.demo.models import Execution

pytestmark = pytest.mark.slow

RECORD = "testproject.demo.workers.Record"
FAST = {"POLL_INTERVAL": 0.2, "SCHEDULER_INTERVAL": 0.2}


def states() -> dict[str, int]:
    return kathikon.storage.count_by_state() if hasattr(kathikon, "storage") else {}


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
    assert kathikon.fetch(later.id).state == "scheduled"
    log = worker.log()
    assert "kathikon worker" in log and "burst" in log
    assert log.count("Flaky attempt") == 2  # one line per failed attempt
    assert signal  # keep import for later tests
