"""Transactional completion: a job completes itself in the same transaction as its writes."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

import kathikon
from kathikon import signals, storage
from kathikon.executor import execute_job, run_job, settle
from kathikon.jobspec import MAX_JSON_DEPTH
from kathikon.models import Job
from tests.runtime.completion_workers import (
    CommitThenRaise,
    CompleteThenDie,
    CompleteThenFail,
    Effect,
)
from tests.runtime.conftest import wait_until
from tests.runtime.lifeline_workers import SlowRecorded
from tests.runtime.result_workers import CompletesThenReturnsASet, nested, runs

SETTINGS = {
    "HEARTBEAT_INTERVAL": 0.5,
    "RESCUE_AFTER": 2.0,
    "POLL_INTERVAL": 0.2,
    "SCHEDULER_INTERVAL": 0.5,
    "QUEUES": {"default": {"concurrency": 2}},
}


def effects(job: Job) -> int:
    return Job.objects.filter(worker=Effect.path(), args__of=job.id.hex).count()


@pytest.mark.django_db(transaction=True)  # on_commit must really fire
def test_completion_commits_with_the_jobs_writes_and_the_ack_is_skipped():
    job = kathikon.insert(CompleteThenDie, {})
    claimed = storage.claim_jobs("default", 1, "n1")[0]
    completed: list[Any] = []

    def receiver(sender: Any, job: Job, **kwargs: Any) -> None:
        completed.append(kwargs["result"])

    signals.job_completed.connect(receiver)
    try:
        execution = settle([run_job(claimed)])[0]
    finally:
        signals.job_completed.disconnect(receiver)
    stored = Job.objects.get(pk=job.id)
    assert (stored.state, stored.result, stored.attempts) == ("completed", {"effect": True}, 1)
    assert (execution.kind, execution.written) == ("completed", True)
    assert completed == [{"effect": True}]  # one signal: the skipped ack sends no second one
    assert effects(job) == 1


@pytest.mark.django_db
def test_an_exception_inside_the_block_rolls_back_the_writes_and_the_completion():
    job = kathikon.insert(CompleteThenFail, {})
    execution = execute_job(storage.claim_jobs("default", 1, "n1")[0])
    stored = Job.objects.get(pk=job.id)
    assert execution.kind == "failed"
    assert stored.state == "dead" and stored.result is None
    assert "inside the block" in stored.errors[-1]["message"]
    assert effects(job) == 0


@pytest.mark.django_db(transaction=True)
def test_a_committed_completion_stands_even_if_perform_raises_afterwards():
    job = kathikon.insert(CommitThenRaise, {})
    execution = execute_job(storage.claim_jobs("default", 1, "n1")[0])
    stored = Job.objects.get(pk=job.id)
    assert (execution.kind, stored.state, stored.result, stored.errors) == (
        "completed", "completed", {"n": 1}, [])
    assert effects(job) == 1


@pytest.mark.django_db
def test_a_fenced_attempt_cannot_complete_and_its_writes_roll_back():
    job = kathikon.insert(Effect, {"x": 1}, queue="default")
    stale = storage.claim_jobs("default", 1, "n1")[0]
    storage.rescue_jobs(nodes=["n1"], send_signals=False)  # the lease moves on
    storage.claim_jobs("default", 1, "n2")
    with pytest.raises(kathikon.InvalidState, match="fenced off"), transaction.atomic():
        kathikon.insert(Effect, {"of": job.id.hex})
        kathikon.complete_in_transaction(stale)
    assert Job.objects.get(pk=job.id).state == "running"
    assert effects(job) == 0


@pytest.mark.django_db
def test_only_a_job_being_performed_can_complete_itself():
    job = kathikon.insert(Effect, {})
    with pytest.raises(kathikon.InvalidState):
        kathikon.complete_in_transaction(job)
    claimed = storage.claim_jobs("default", 1, "n1")[0]
    for unstorable in ({"bad": object()}, {"nan": float("nan")}, {"text": "a\x00b"}):
        with pytest.raises(kathikon.InvalidJob) as caught:
            kathikon.complete_in_transaction(claimed, unstorable)
        assert caught.value.key == "result"
    assert Job.objects.get(pk=job.id).state == "running"


@pytest.mark.django_db(transaction=True)  # the completion really commits, after the refusals
def test_a_result_deeper_than_args_may_nest_is_refused_and_the_transaction_goes_on():
    """One rule for what is stored (issue 26, 6c): nested as deep as args may be and no
    deeper, on every database (MariaDB's limit). A typed error raised before any SQL, so the
    caller's transaction stays usable: it can still complete, and its writes commit."""
    job = kathikon.insert(Effect, {})
    claimed = storage.claim_jobs("default", 1, "n1")[0]
    refused = [{"tree": nested(39)}, nested(MAX_JSON_DEPTH + 1), {1, 2}, 10**4999, ["\ud800"]]
    with transaction.atomic():
        kathikon.insert(Effect, {"of": job.id.hex})
        for result in refused:
            with pytest.raises(kathikon.InvalidJob) as caught:
                kathikon.complete_in_transaction(claimed, result)
            assert caught.value.key == "result"
            assert str(caught.value).startswith("the result cannot be stored")
        kathikon.complete_in_transaction(claimed, {"tree": nested(MAX_JSON_DEPTH - 1)})
    stored = Job.objects.get(pk=job.id)
    assert (stored.state, stored.result) == ("completed", {"tree": nested(MAX_JSON_DEPTH - 1)})
    assert effects(job) == 1


@pytest.mark.django_db(transaction=True)
def test_what_perform_returns_after_completing_itself_is_neither_stored_nor_checked(
        tmp_path: Path, caplog: pytest.LogCaptureFixture):
    log = tmp_path / "runs"
    job = kathikon.insert(CompletesThenReturnsASet, {"log": str(log)})
    execution = execute_job(storage.claim_jobs("default", 1, "n1")[0])
    stored = Job.objects.get(pk=job.id)
    assert (execution.kind, stored.state, stored.attempts, stored.errors) == (
        "completed", "completed", 1, [])
    assert stored.result == {"completed": "in its transaction"}
    assert runs(log) == {job.id.hex: 1}
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


@pytest.mark.slow
def test_kill_9_right_after_the_commit_leaves_it_completed_and_never_run_again(
        worker_processes: Any, tmp_path: Path):
    # A slow job claimed alongside it is the control: the lifeline must rescue that one.
    control = kathikon.insert(SlowRecorded, {"log": str(tmp_path / "log"), "seconds": 0.5})
    job = kathikon.insert(CompleteThenDie, {"die": True})
    victim = worker_processes.start("--node", "victim", settings=SETTINGS)
    assert victim.wait(timeout=30) != 0  # it killed itself right after the commit
    stored = Job.objects.get(pk=job.id)
    assert (stored.state, stored.attempts, stored.result) == ("completed", 1, {"effect": True})
    assert effects(job) == 1
    assert Job.objects.get(pk=control.id).attempted_by == "victim"

    other = worker_processes.start("--node", "other", settings=SETTINGS)
    wait_until(lambda: Job.objects.get(pk=control.id).state == "completed", timeout=30,
               message="the control job to be rescued and run by the other node")
    assert Job.objects.get(pk=control.id).attempted_by == "other"
    stored = Job.objects.get(pk=job.id)
    assert (stored.state, stored.attempts, stored.lease) == ("completed", 1, 1)
    assert effects(job) == 1
    other.signal(signal.SIGTERM)
    assert other.wait(timeout=20) == 0
