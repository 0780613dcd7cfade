"""Real worker processes: pause all pauses a queue the worker serves without the settings
naming it (``--queues``, jobs only, no ``Queue`` row) and resume all resumes it; ``-v 2``
logs the line per finished job that the quick start shows."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from django.test import override_settings

import kathikon
from kathikon import dashboard
from tests import workers
from tests.runtime import conftest as runtime
from tests.runtime.conftest import wait_until

# The runtime's fixture: real kathikon_worker processes, killed at teardown.
worker_processes = runtime.worker_processes

TASKS = {"default": {"BACKEND": "kathikon.backends.KathikonBackend",
                     "QUEUES": ["default", "emails", "tasks_only"]}}


def state(job: kathikon.Job) -> str:
    return kathikon.fetch(job.id).state


@pytest.mark.slow
@override_settings(TASKS=TASKS)
def test_after_pause_all_no_new_job_of_an_unconfigured_queue_starts(worker_processes):
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


@pytest.mark.slow
def test_v2_logs_the_quick_start_s_line_per_finished_job(worker_processes):
    jobs = [kathikon.insert(workers.Succeed, {"n": n}) for n in range(3)]
    worker = worker_processes.start("--burst", "-v", "2", settings={"POLL_INTERVAL": 0.2})
    assert worker.wait(timeout=30) == 0
    lines = re.findall(r"kathikon job (\w+) tests\.workers\.Succeed attempt 1/\d+ "
                       r"completed in \d+\.\d{3}s", worker.log())
    assert sorted(lines) == sorted(job.id.hex for job in jobs), worker.log()
    quick = (Path(__file__).resolve().parents[2] / "docs/quick-start.md").read_text()
    assert re.search(r"kathikon job 01a2… myapp\.workers\.\w+ attempt 1/5 completed in "
                     r"\d+\.\d{3}s", quick)


@pytest.mark.django_db
@override_settings(TASKS=TASKS)
def test_kathikon_ops_pause_all_covers_the_same_queues():
    from io import StringIO

    from django.core.management import call_command

    from kathikon import storage
    from kathikon.models import Queue

    kathikon.insert(workers.Succeed, {}, queue="adhoc")
    storage.register_node("node-a", queues={"served_only": 1})
    out = StringIO()
    call_command("kathikon_ops", "pause", "--all", stdout=out)
    assert out.getvalue().strip() == (
        "paused: adhoc, default, emails, served_only, tasks_only")
    assert Queue.objects.filter(paused=True).count() == 5
    call_command("kathikon_ops", "resume", "--all", stdout=StringIO())
    assert not Queue.objects.filter(paused=True).exists()
