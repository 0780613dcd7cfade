"""External runners next to real worker processes: a late outcome after a rescue is refused."""

from __future__ import annotations

from typing import Any

import pytest

import kathikon
from kathikon.models import Job
from tests import workers
from tests.runtime.conftest import wait_until

SETTINGS = {"HEARTBEAT_INTERVAL": 0.3, "RESCUE_AFTER": 1.5, "POLL_INTERVAL": 0.2,
            "SCHEDULER_INTERVAL": 0.5, "QUEUES": {"default": {"concurrency": 2}}}


@pytest.mark.slow
def test_a_worker_rescues_a_stalled_runners_job_and_the_late_outcome_changes_nothing(
        worker_processes: Any, postgres_only: None):
    ran_by_runner = kathikon.insert(workers.Succeed, {"who": "runner"})
    job = kathikon.claim(ran_by_runner.id, node="transcoder-1")  # then the runner stalls
    worker = worker_processes.start(settings=SETTINGS)
    worker.wait_for_log("running", timeout=30)

    wait_until(lambda: kathikon.fetch(job.id).state == "completed", timeout=20,
               message="the worker to rescue the stalled claim and run the job")
    done = kathikon.fetch(job.id)
    assert done.attempts == 2 and done.lease == job.lease + 1
    assert done.result == {"echo": {"who": "runner"}}

    with pytest.raises(kathikon.StaleLease):
        kathikon.complete(job, {"late": True})
    with pytest.raises(kathikon.StaleLease):
        kathikon.fail(job, "late failure")
    after = Job.objects.get(id=job.id)
    assert (after.state, after.result, after.lease, after.errors) == (
        done.state, done.result, done.lease, done.errors)
    assert [error["kind"] for error in after.errors] == ["kathikon.NodeVanished"]


@pytest.mark.slow
def test_runner_and_worker_share_a_queue_and_each_job_finishes_once(
        worker_processes: Any, postgres_only: None):
    ids = kathikon.insert_many([(workers.Succeed, {"i": i}) for i in range(60)]).ids
    worker = worker_processes.start(settings=SETTINGS)
    worker.wait_for_log("running", timeout=30)
    finished_by_runner = []
    while True:
        job = kathikon.claim_available("default", node="runner-1")
        if job is None:
            break
        kathikon.complete(job, {"by": "runner"})
        finished_by_runner.append(job.id.hex)
    wait_until(lambda: Job.objects.filter(state="completed").count() == len(ids), timeout=30,
               message="every job to complete")
    jobs = list(Job.objects.all())
    assert all(job.attempts == 1 and job.lease == 1 and not job.errors for job in jobs)
    by_runner = {job.id.hex for job in jobs if job.result == {"by": "runner"}}
    assert by_runner == set(finished_by_runner)
    assert all(job.result == {"echo": job.args} for job in jobs if job.id.hex not in by_runner)
