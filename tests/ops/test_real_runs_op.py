"""Reports after real runs: jobs claimed and executed by the executor, errors as it writes them."""

from __future__ import annotations

import pytest

import kathikon
from kathikon import dashboard, report, storage
from kathikon.executor import execute_job
from tests import workers

pytestmark = pytest.mark.django_db


def run_due(queue: str = "default") -> None:
    for job in storage.claim_jobs(queue, 100, "test-node"):
        execute_job(job)


def test_reports_after_real_runs():
    for index in range(3):
        kathikon.insert(workers.Succeed, {"n": index})
    kathikon.insert(workers.RaiseDiscard, {})
    kathikon.insert(workers.Explode, {}, max_attempts=1)
    kathikon.insert(workers.Explode, {})  # retryable: 3 attempts
    run_due()

    summary = {s.name: s for s in report.queue_summary()}["default"]
    assert summary.counts["completed"] == 3 and summary.counts["dead"] == 2
    assert summary.counts["retryable"] == 1
    assert summary.completed_last_minute == 3 and summary.failed_last_hour == 2

    failures = {(f.worker, f.kind): f for f in report.failure_summary()}
    explode = failures[("tests.workers.Explode", "builtins.RuntimeError")]
    assert explode.count == 2 and explode.sample_message == "boom 1"
    discarded = failures[("tests.workers.RaiseDiscard", "kathikon.workers.Discard")]
    assert discarded.count == 1 and discarded.sample_message == "bad input"

    points = report.throughput(minutes=5)
    assert sum(p.completed for p in points) == 3 and sum(p.failed for p in points) == 2

    dead = dashboard.list_jobs(state="dead", worker="tests.workers.Explode").jobs[0]
    detail = dashboard.fetch_job(dead.id)
    assert "Traceback (most recent call last)" in detail.errors[-1]["traceback"]
    assert [item["event"] for item in detail.history][-1] in ("dead", "failed")

    assert dashboard.retry_jobs([dead.id]).changed == [dead.id.hex]
    run_due()
    assert kathikon.fetch(dead.id).attempts == 2
