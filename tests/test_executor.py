"""The executor: every outcome of perform, its ack, its signals, and fencing."""

from __future__ import annotations

from unittest.mock import ANY

import pytest

import kathikon
from kathikon import signals, storage
from kathikon.executor import execute_job, run_job, settle
from kathikon.models import Job
from kathikon.storable import UNSTORED
from tests import workers
from tests.runtime.result_workers import RESULTS, UnstorableResult, runs

pytestmark = pytest.mark.django_db


def claim(queue: str = "default", limit: int = 1) -> list[Job]:
    return storage.claim_jobs(queue, limit, "exec-node")


def run(worker, args=None, **options) -> Job:
    kathikon.insert(worker, args or {}, **options)
    (job,) = claim(options.get("queue", getattr(worker, "queue", "default")))
    execute_job(job)
    return kathikon.fetch(job.id)


class Recorder:
    def __init__(self, *names):
        self.events = []
        self.names = names

    def __enter__(self):
        for name in self.names:
            signals.ALL_SIGNALS[name].connect(self.receive, weak=False, dispatch_uid=f"rec-{name}")
        return self

    def receive(self, sender, signal, **kwargs):
        name = next(n for n, s in signals.ALL_SIGNALS.items() if s is signal)
        self.events.append((name, sender, kwargs))

    def __exit__(self, *exc):
        for name in self.names:
            signals.ALL_SIGNALS[name].disconnect(dispatch_uid=f"rec-{name}")


def test_return_value_completes_the_job_and_stores_the_result():
    job = run(workers.Succeed, {"a": [1, 2]})
    assert (job.state, job.attempts, job.result) == ("completed", 1, {"echo": {"a": [1, 2]}})
    assert job.completed_at is not None
    assert job.errors == []


@pytest.mark.parametrize("case", list(RESULTS))
def test_a_result_that_cannot_be_stored_completes_the_job_with_a_marker(case, tmp_path, caplog):
    """The work is done: the job completes once, its result replaced by a marker (issue 26)."""
    log = tmp_path / "runs"
    _, reason, kind = RESULTS[case]
    with Recorder("job_completed", "job_failed") as recorder:
        job = run(UnstorableResult, {"log": str(log), "case": case})
    assert (job.state, job.attempts, job.errors) == ("completed", 1, [])
    marker = job.result[UNSTORED]  # as the database gave it back
    assert job.result == {UNSTORED: {"reason": reason, "type": kind, "message": ANY}}
    assert marker["message"].startswith("the result cannot be stored: ")
    assert runs(log) == {job.id.hex: 1}
    ((name, _, sent),) = recorder.events
    assert name == "job_completed" and sent["result"] == job.result
    warnings = [r for r in caplog.records if job.id.hex in r.getMessage()]
    assert [r.levelname for r in warnings] == ["WARNING"]  # once, for this outcome
    assert marker["message"] in warnings[0].getMessage()


def test_a_result_is_neither_checked_nor_stored_when_results_are_discarded(settings):
    settings.KATHIKON = {"RESULT_STORAGE": "discard"}
    assert run(workers.Succeed, {"a": 1}).result is None
    job = run(workers.Unserialisable)
    assert (job.state, job.result, job.errors) == ("completed", None, [])


def test_exception_makes_the_job_retryable_with_backoff_and_an_error_entry():
    job = run(workers.Explode)
    assert job.state == "retryable"
    assert job.attempts == 1
    (error,) = job.errors
    assert error["attempt"] == 1
    assert error["kind"] == "builtins.RuntimeError"
    assert error["message"] == "boom 1"
    assert "Traceback" in error["traceback"] and "boom 1" in error["traceback"]
    delay = (job.available_at - job.started_at).total_seconds()
    assert 5 * 2 <= delay <= 10 * 1.1 + 1  # backoff_seconds(1) = 10, plus jitter


def test_exception_at_max_attempts_makes_the_job_dead():
    job = kathikon.insert(workers.Explode, {}, max_attempts=2)
    for expected in ("retryable", "dead"):
        storage.update_job(kathikon.fetch(job.id), available_at=job.inserted_at)
        (claimed,) = claim()
        execute_job(claimed)
        assert kathikon.fetch(job.id).state == expected
    dead = kathikon.fetch(job.id)
    assert (dead.attempts, len(dead.errors)) == (2, 2)
    assert dead.completed_at is not None


def test_retry_outcome_uses_its_own_delay():
    job = run(workers.AskRetry)
    assert job.state == "retryable"
    assert job.errors[0]["kind"] == "kathikon.workers.Retry"
    assert 29 <= (job.available_at - job.started_at).total_seconds() <= 31


def test_worker_backoff_override_and_a_broken_backoff():
    job = run(workers.CustomBackoff)
    assert 1000 <= (job.available_at - job.started_at).total_seconds() <= 1101
    assert run(workers.BrokenBackoff).state == "retryable"


def test_discard_makes_the_job_dead_at_once():
    job = run(workers.RaiseDiscard)
    assert (job.state, job.attempts) == ("dead", 1)
    assert job.errors[0]["message"] == "bad input"


def test_snooze_schedules_again_without_counting_the_attempt():
    job = run(workers.SnoozeTen)
    assert (job.state, job.attempts, job.errors) == ("scheduled", 0, [])
    assert 9 <= (job.available_at - job.started_at).total_seconds() <= 11
    assert job.scheduled_at == job.available_at


def test_unknown_worker_at_run_time_makes_the_job_dead_with_a_clear_error():
    job = kathikon.insert(workers.Succeed, {})
    Job.objects.filter(id=job.id).update(worker="tests.workers.Deleted")
    (claimed,) = claim()
    execution = execute_job(claimed)
    stored = kathikon.fetch(job.id)
    assert (execution.kind, stored.state) == ("discarded", "dead")
    assert stored.errors[0]["kind"] == "kathikon.UnknownWorker"
    assert "tests.workers.Deleted" in stored.errors[0]["message"]


def test_async_perform_runs_on_the_process_loop():
    assert run(workers.AsyncSucceed).result == {"async": True}


def test_signals_for_each_outcome_carry_duration_and_queue_time():
    names = ("job_started", "job_completed", "job_failed", "job_discarded", "job_snoozed")
    with Recorder(*names) as recorder:
        run(workers.Succeed)
        run(workers.Explode)
        run(workers.RaiseDiscard)
        run(workers.SnoozeTen)
    kinds = [(name, sender) for name, sender, _ in recorder.events]
    assert kinds == [
        ("job_started", workers.Succeed), ("job_completed", workers.Succeed),
        ("job_started", workers.Explode), ("job_failed", workers.Explode),
        ("job_started", workers.RaiseDiscard), ("job_discarded", workers.RaiseDiscard),
        ("job_started", workers.SnoozeTen), ("job_snoozed", workers.SnoozeTen),
    ]
    for name, _, kwargs in recorder.events:
        assert isinstance(kwargs["job"], Job)
        assert kwargs["queue_time"] >= 0
        if name != "job_started":
            assert kwargs["duration"] >= 0
    completed = recorder.events[1][2]
    assert completed["result"] == {"echo": {}}
    failed = recorder.events[3][2]
    assert isinstance(failed["exception"], RuntimeError)
    assert failed["retry_at"] is not None


def test_a_raising_receiver_never_breaks_a_job(caplog):
    def bad_receiver(sender, **kwargs):
        raise RuntimeError("receiver bug")

    signals.job_started.connect(bad_receiver)
    signals.job_completed.connect(bad_receiver)
    try:
        job = run(workers.Succeed)
    finally:
        signals.job_started.disconnect(bad_receiver)
        signals.job_completed.disconnect(bad_receiver)
    assert job.state == "completed"
    assert "receiver" in caplog.text


def test_a_stale_ack_is_fenced_off_and_changes_nothing():
    kathikon.insert(workers.Succeed, {})
    (stale,) = claim()
    # Another node takes over (as after a rescue): the row's lease moves on.
    Job.objects.filter(id=stale.id).update(state="retryable", available_at=stale.started_at)
    (fresh,) = storage.claim_jobs("default", 1, "other-node")
    assert fresh.lease == stale.lease + 1
    execution = execute_job(stale)
    assert not execution.written
    stored = kathikon.fetch(stale.id)
    assert (stored.state, stored.attempted_by) == ("running", "other-node")
    execute_job(fresh)
    assert kathikon.fetch(stale.id).state == "completed"


def test_settle_writes_a_batch_of_outcomes_in_one_call():
    for worker in (workers.Succeed, workers.Succeed, workers.Explode, workers.SnoozeTen):
        kathikon.insert(worker, {})
    jobs = claim(limit=10)
    executions = settle([run_job(job) for job in jobs])
    assert all(execution.written for execution in executions)
    states = sorted(kathikon.fetch(job.id).state for job in jobs)
    assert states == ["completed", "completed", "retryable", "scheduled"]


def test_attempts_count_at_start_so_a_crash_uses_one_up():
    kathikon.insert(workers.Succeed, {})
    (job,) = claim()
    assert kathikon.fetch(job.id).attempts == 1  # before perform ever ran


# -- outcomes made storable at the source (issue 10) ----------------------------------------

POISON = "tests.runtime.fault_workers.Poison"


@pytest.mark.parametrize(("case", "kind", "text"), [
    ("nul", "builtins.ValueError", "bad \ufffd byte"),
    ("surrogate", "builtins.ValueError", "lone \ufffd surrogate"),
    ("snooze_inf", "builtins.ValueError", "Snooze needs a finite number of seconds"),
    ("system_exit", "builtins.SystemExit", "3"),
    ("keyboard_interrupt", "builtins.KeyboardInterrupt", ""),
])
def test_a_poison_outcome_is_recorded_as_a_storable_failed_attempt(case, kind, text):
    job = run(POISON, {"case": case})
    assert job.state == "retryable"
    error = job.errors[0]
    assert error["kind"] == kind
    assert text in error["message"]
    assert "\x00" not in error["traceback"]


def test_long_messages_and_tracebacks_are_capped_keeping_head_and_tail():
    from kathikon.storable import MAX_MESSAGE, MAX_TRACEBACK

    error = run(POISON, {"case": "long"}).errors[0]
    assert len(error["message"]) <= MAX_MESSAGE and len(error["traceback"]) <= MAX_TRACEBACK
    assert error["message"].startswith("HEAD") and error["message"].endswith("TAIL")
    assert error["traceback"].startswith("Traceback") and error["traceback"].endswith("TAIL\n")
    assert "characters cut" in error["message"]


def test_delays_are_clamped_and_a_nan_backoff_falls_back_to_the_default():
    from kathikon.storable import MAX_DELAY

    job = run(POISON, {"case": "retry_far"})
    assert job.state == "retryable" and job.errors[0]["message"] == "come back much later"
    assert _wait(job) == pytest.approx(MAX_DELAY, abs=5)
    job = run("tests.runtime.fault_workers.InfiniteBackoff")
    assert job.state == "retryable" and _wait(job) == pytest.approx(MAX_DELAY, abs=5)
    job = run("tests.runtime.fault_workers.NanBackoff")
    assert job.state == "retryable" and 9 <= _wait(job) <= 12  # 10 s + jitter: the default


def _wait(job) -> float:
    import datetime as dt

    failed_at = dt.datetime.fromisoformat(job.errors[-1]["at"])
    return (job.available_at - failed_at).total_seconds()
