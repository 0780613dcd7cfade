"""A result that cannot be stored (issue 26, item 3), with a real ``kathikon_worker`` process.

``perform``'s work is done, so the job completes once: its result is replaced by the marker
of kathikon.storable and a warning is logged once per job. Before, the attempt failed with
``UnstorableOutcome`` and ran again, side effects and all, until its attempts ran out. Sync
and async workers, a Django Task, and a job that completed in its own transaction.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

import kathikon
from kathikon import compat
from kathikon.models import Job
from kathikon.storable import UNSTORED
from tests.runtime.result_workers import (
    RESULTS,
    AsyncUnstorableResult,
    CompletesThenReturnsASet,
    UnstorableResult,
    runs,
)

from .conftest import wait_until

pytestmark = pytest.mark.slow

FAST = {"POLL_INTERVAL": 0.2, "SCHEDULER_INTERVAL": 0.2, "HEARTBEAT_INTERVAL": 1}
BOUND = 30  # seconds, on a loaded two-core machine
ASYNC_CASES = ("set", "nan", "deep_40")


def settled(ids: list[Any]) -> bool:
    """Every job ended: completed, or dead after its retries (what happened before)."""
    return Job.objects.filter(id__in=ids, state__in=["completed", "dead"]).count() == len(ids)


def test_a_worker_process_completes_a_job_whose_result_cannot_be_stored_once(
        worker_processes: Any, tmp_path: Path):
    log = tmp_path / "runs"
    expected: dict[str, tuple[str, str]] = {}  # job id -> (reason, type) of its marker
    for case, (_, reason, kind) in RESULTS.items():
        expected[kathikon.insert(UnstorableResult, {"log": str(log), "case": case}).id.hex] = (
            reason, kind)
    for case in ASYNC_CASES:
        job = kathikon.insert(AsyncUnstorableResult, {"log": str(log), "case": case})
        expected[job.id.hex] = RESULTS[case][1:]
    task_result = None
    if compat.AVAILABLE:
        from tests.runtime.result_workers import unstorable_task

        task_result = unstorable_task.enqueue(str(log), "set")
        expected[task_result.id] = ("not_json", "builtins.set")
    in_transaction = kathikon.insert(CompletesThenReturnsASet, {"log": str(log)})
    ids = [*expected, in_transaction.id.hex]

    worker = worker_processes.start("--queues", "default:4", "--node", "results",
                                    settings=FAST)
    wait_until(lambda: settled(ids), BOUND, interval=0.2, message="every job settled")

    assert runs(log) == dict.fromkeys(ids, 1)  # perform ran exactly once for each job
    output = worker.log()
    for job_id, (reason, kind) in expected.items():
        job = kathikon.fetch(job_id)
        assert (job.state, job.attempts, job.errors) == ("completed", 1, []), job_id
        marker = job.result[UNSTORED]
        assert (marker["reason"], marker["type"]) == (reason, kind)
        assert marker["message"].startswith("the result cannot be stored: ")
        assert output.count(f"job {job_id} ") == 1, output  # one warning, for this outcome
        assert f"job {job_id} ({job.worker}) completed, but the result cannot be stored" in output
    done = kathikon.fetch(in_transaction.id)
    assert (done.state, done.result) == ("completed", {"completed": "in its transaction"})
    assert f"job {in_transaction.id.hex} " not in output  # its return value was never stored
    if task_result is not None:
        task_result.refresh()
        assert task_result.status == compat.TaskResultStatus.SUCCESSFUL
        assert task_result.return_value == kathikon.fetch(task_result.id).result
        assert task_result.return_value[UNSTORED]["type"] == "builtins.set"
    assert "UnstorableOutcome" not in output and "retrying in" not in output
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.log()
