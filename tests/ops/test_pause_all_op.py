"""Pause all with a real worker: a queue the worker serves without the settings naming it
(``--queues``, jobs only, no ``Queue`` row) is paused too, and resume all resumes it."""

from __future__ import annotations

import time

import pytest
from django.test import override_settings

import kathikon
from kathikon import dashboard
from tests import workers
from tests.runtime.conftest import (  # noqa: F401  (fixtures and the failure-log hook)
    pytest_runtest_makereport,
    wait_until,
    worker_processes,
)

TASKS = {"default": {"BACKEND": "kathikon.backends.KathikonBackend",
                     "QUEUES": ["default", "emails", "tasks_only"]}}


def state(job: kathikon.Job) -> str:
    return kathikon.fetch(job.id).state


@pytest.mark.slow
@override_settings(TASKS=TASKS)
def test_after_pause_all_no_new_job_of_an_unconfigured_queue_starts(
        worker_processes):  # noqa: F811  (the fixture imported above)
    first = kathikon.insert(workers.Succeed, {}, queue="adhoc")
    worker = worker_processes.start("--queues", "adhoc,tasks_only,control",
                                    settings={"POLL_INTERVAL": 0.2})
    wait_until(lambda: state(first) == "completed", timeout=30, message="the first adhoc job")

    dashboard.pause_all()
    waiting = [kathikon.insert(workers.Succeed, {}, queue=name)
               for name in ("adhoc", "tasks_only")]
    # A queue resumed after the pause proves the worker polled since: every dispatcher
    # polls each POLL_INTERVAL, and a claim refuses a paused queue.
    kathikon.resume_queue("control")
    probe = kathikon.insert(workers.Succeed, {}, queue="control")
    wait_until(lambda: state(probe) == "completed", timeout=30, message="the control job")
    deadline = time.monotonic() + 1.0  # five more polls of each queue
    while time.monotonic() < deadline:
        assert [state(job) for job in waiting] == ["available", "available"], worker.log()
        time.sleep(0.1)

    dashboard.resume_all()
    wait_until(lambda: all(state(job) == "completed" for job in waiting), timeout=30,
               message="the paused jobs after resume all")
