"""The crash budget: crash suspects, quarantine claims and the culprit's charge (storage and
the quarantine gate, without processes; the real crashes are in test_faults_nodes.py)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

import kathikon
from kathikon import storage
from kathikon.models import Job, JobEvent, Node, Queue
from kathikon.runtime.lifeline import Lifeline
from kathikon.runtime.quarantine import Quarantine
from kathikon.storage.acks import Ack
from kathikon.storage.quarantine import claim_suspect, suspects_waiting
from kathikon.storage.rescue import CRASH_KIND, CRASH_LIMIT, ERROR_KIND
from tests import workers
from tests.runtime.test_services_periodic import Clock

RESCUE_AFTER = 60


@pytest.fixture
def clock() -> Clock:
    return Clock()


def crash(name: str, clock: Clock) -> list[Any]:
    """``name``'s process dies: its heartbeat goes silent and a lifeline rescues its jobs."""
    Node.objects.filter(name=name).update(
        heartbeat_at=clock.at - dt.timedelta(seconds=RESCUE_AFTER + 5))
    return Lifeline("rescuer", clock=clock, rescue_after=RESCUE_AFTER).run_once()


def node(name: str, clock: Clock) -> str:
    """A live node ``name`` (registered afresh: nothing held yet)."""
    storage.register_node(name, "host", 1, {"default": 5}, at=clock.at)
    return name


def claim(name: str, count: int = 5) -> list[kathikon.Job]:
    storage.register_node(name, "host", 1, {"default": 5})
    return storage.claim_jobs("default", count, name)


def fresh(job: Any) -> Job:
    return Job.objects.get(id=job.id)


@pytest.mark.django_db
def test_neighbours_of_a_crash_keep_their_attempt_and_run_alone_next(clock: Clock):
    culprit = kathikon.insert(workers.Succeed, {"n": 0}, max_attempts=1)
    for n in range(1, 4):
        kathikon.insert(workers.Succeed, {"n": n}, max_attempts=1)
    held = claim("w1", 4)
    assert len(held) == 4
    rescued = crash("w1", clock)
    assert {r.state for r in rescued} == {"retryable"} and len(rescued) == 4
    for job in map(fresh, held):
        assert (job.attempts, job.suspect, job.crashes) == (0, True, 0)
        assert job.errors[-1]["kind"] == ERROR_KIND
    # Ordinary claims leave suspects alone; the quarantine claims one at a time.
    kathikon.insert(workers.Succeed, {"ordinary": True})
    (ordinary,) = storage.claim_jobs("default", 10, "w2")
    assert ordinary.args == {"ordinary": True}
    assert suspects_waiting(["default"]) and not suspects_waiting(["emails"])
    first = claim_suspect(["default"], node("w2", clock))
    assert first is not None and first.id == culprit.id  # oldest first, like claims
    row = fresh(first)
    assert (row.state, row.attempts, row.suspect) == ("running", 1, False)
    assert row.quarantine_lease == row.lease == first.lease and row.attempted_by == "w2"
    # Completing normally clears it for good: it is an ordinary job again.
    assert storage.ack_jobs([Ack(first, "completed")]) == {first.id}
    assert fresh(first).state == "completed"


@pytest.mark.django_db
def test_a_crash_while_running_alone_is_charged_to_that_job_only(clock: Clock):
    poison = kathikon.insert(workers.Succeed, {}, priority=1)  # the first suspect claimed
    innocent = kathikon.insert(workers.Succeed, {}, max_attempts=1)
    claim("w1", 2)
    crash("w1", clock)  # together: both suspects, nobody charged
    for round_ in range(1, CRASH_LIMIT + 1):
        job = claim_suspect(["default"], node("w2", clock))
        assert job is not None and job.id == poison.id
        (rescued,) = crash("w2", clock)
        row = fresh(poison)
        assert row.crashes == round_ and row.attempts == round_  # charged: attempt and crash
        entry = row.errors[-1]
        assert entry["kind"] == CRASH_KIND and entry["node"] == "w2"
        if round_ < CRASH_LIMIT:
            assert rescued.state == "retryable" and row.suspect
            assert "runs alone again" in entry["message"]
        else:
            assert rescued.state == "dead" and row.state == "dead" and not row.suspect
            assert f"crashed its worker {CRASH_LIMIT} times" in entry["message"]
            assert "crash limit" in entry["message"]
    event = JobEvent.objects.filter(job_id=poison.id, kind="rescued").last()
    assert event is not None and event.data["crashes"] == CRASH_LIMIT
    assert event.data["error"] == CRASH_KIND
    # The innocent neighbour was never charged and still runs (alone, once).
    row = fresh(innocent)
    assert (row.state, row.attempts, row.crashes, row.suspect) == ("retryable", 0, 0, True)
    job = claim_suspect(["default"], node("w2", clock))
    assert job is not None and job.id == innocent.id
    assert storage.ack_jobs([Ack(job, "completed")]) == {innocent.id}


@pytest.mark.django_db
def test_retrying_or_rerunning_a_crasher_gives_a_fresh_budget_and_still_runs_alone(
        clock: Clock):
    poison = kathikon.insert(workers.Succeed, {}, max_attempts=1)
    claim("w1", 1)
    crash("w1", clock)
    claim_suspect(["default"], node("w2", clock))
    crash("w2", clock)
    assert fresh(poison).state == "dead"
    copy = storage.rerun_job(poison.id)
    retried = storage.retry_job(poison.id)
    for job in (retried, copy):
        row = fresh(job)
        assert (row.state, row.crashes, row.suspect) == ("available", 0, True)
    assert storage.claim_jobs("default", 5, "w3") == []  # never beside other jobs
    assert {claim_suspect(["default"], "w3").id for _ in range(2)} == {poison.id, copy.id}


@pytest.mark.django_db
def test_a_crash_while_alone_on_the_last_attempt_is_dead_and_says_so(clock: Clock):
    poison = kathikon.insert(workers.Succeed, {}, max_attempts=1)
    claim("w1", 1)
    crash("w1", clock)
    claim_suspect(["default"], node("w2", clock))
    (rescued,) = crash("w2", clock)
    row = fresh(poison)
    assert rescued.state == row.state == "dead" and row.crashes == 1
    assert "crashed its worker once" in row.errors[-1]["message"]
    assert "its last attempt (1)" in row.errors[-1]["message"]


@pytest.mark.django_db
def test_a_suspect_failing_normally_is_cleared(clock: Clock):
    suspect = kathikon.insert(workers.Succeed, {})
    claim("w1", 1)
    crash("w1", clock)
    job = claim_suspect(["default"], node("w2", clock))
    assert job is not None
    storage.ack_jobs([Ack(job, "retryable", error={"kind": "ValueError", "message": "x"})])
    row = fresh(suspect)
    assert (row.state, row.suspect, row.crashes, row.attempts) == ("retryable", False, 0, 1)
    (again,) = claim("w3")  # an ordinary claim takes it again
    assert again.id == suspect.id
    # A crash beside others now is not charged to it: it ran under an ordinary claim.
    crash("w3", clock)
    row = fresh(suspect)
    assert (row.suspect, row.crashes, row.attempts) == (True, 0, 1)


@pytest.mark.django_db
def test_a_quarantined_job_left_at_a_clean_stop_stays_a_suspect(clock: Clock):
    suspect = kathikon.insert(workers.Succeed, {})
    claim("w1", 1)
    crash("w1", clock)
    assert claim_suspect(["default"], node("w2", clock)) is not None
    storage.mark_node_stopped("w2")
    (rescued,) = Lifeline("rescuer", clock=clock, rescue_after=RESCUE_AFTER).run_once()
    row = fresh(suspect)
    assert (rescued.state, row.suspect, row.crashes, row.attempts) == ("retryable", True, 0, 0)


@pytest.mark.django_db
def test_a_node_recorded_as_crashed_is_charged_as_a_crash_not_as_a_clean_stop(clock: Clock):
    """The lifeline records a silent node as crashed (issue 26, 6b); jobs still held in its
    name (one claimed as it woke, say) are charged as a crash's, never as a stopped node's."""
    poison = kathikon.insert(workers.Succeed, {})
    claim("w1", 1)
    crash("w1", clock)
    assert claim_suspect(["default"], node("w2", clock)) is not None  # running alone
    neighbour = kathikon.insert(workers.Succeed, {})
    (beside,) = storage.claim_jobs("default", 1, node("w3", clock))
    silent = clock.at - dt.timedelta(seconds=RESCUE_AFTER + 5)
    Node.objects.filter(name__in=["w2", "w3"]).update(heartbeat_at=silent, status="crashed")
    rescued = Lifeline("rescuer", clock=clock, rescue_after=RESCUE_AFTER).run_once()
    assert {r.job.id for r in rescued} == {poison.id, beside.id}
    row = fresh(poison)  # the culprit: it ran alone
    assert (row.state, row.crashes, row.attempts, row.suspect) == ("retryable", 1, 1, True)
    assert row.errors[-1]["kind"] == CRASH_KIND
    assert "node w2 stopped heartbeating" in row.errors[-1]["message"]
    row = fresh(neighbour)  # beside others: a suspect, its attempt back
    assert (row.state, row.crashes, row.attempts, row.suspect) == ("retryable", 0, 0, True)
    assert row.errors[-1]["kind"] == ERROR_KIND


@pytest.mark.django_db
def test_suspects_of_a_paused_or_other_queue_are_not_claimed(clock: Clock):
    kathikon.insert(workers.Succeed, {}, queue="emails")
    storage.claim_jobs("emails", 1, node("w1", clock))
    crash("w1", clock)
    assert claim_suspect(["default"], node("w2", clock)) is None
    assert claim_suspect([], "w2") is None and not suspects_waiting([])
    Queue.objects.create(name="emails", paused=True)
    assert not suspects_waiting(["emails"]) and claim_suspect(["emails"], node("w2", clock)) is None
    Queue.objects.filter(name="emails").update(paused=False)
    assert claim_suspect(["emails"], node("w2", clock)) is not None


# -- the gate in a worker process (fake dispatchers, an injected clock) ------------------------


class FakeDispatcher:
    def __init__(self) -> None:
        self.held = False
        self.jobs: list[Any] = []
        self.running = 0

    def hold(self, held: bool) -> None:
        self.held = held

    def adopt(self, job: Any) -> None:
        self.jobs.append(job)
        self.running += 1

    @property
    def quiet(self) -> bool:
        return self.running == 0


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.django_db
def test_the_gate_drains_the_process_then_runs_suspects_one_at_a_time(clock: Clock):
    for _ in range(2):
        kathikon.insert(workers.Succeed, {})
    claim("w1", 2)
    crash("w1", clock)
    ticks = Ticks()
    gate = Quarantine("w2", check_every=1.0, clock=ticks)
    default, emails = FakeDispatcher(), FakeDispatcher()
    default.running = 1  # an ordinary job runs
    dispatchers = {"default": default, "emails": emails}

    gate.step(dispatchers, acker_idle=True)
    assert gate.draining and default.held and emails.held and not default.jobs
    default.running = 0
    gate.step(dispatchers, acker_idle=False)  # an outcome is still being written
    assert not default.jobs
    gate.step(dispatchers, acker_idle=True)
    (first,) = default.jobs
    assert gate.job is first and default.held and emails.held
    gate.step(dispatchers, acker_idle=True)  # still running: nothing more
    assert len(default.jobs) == 1
    storage.ack_jobs([Ack(first, "completed")])
    default.running = 0
    gate.step(dispatchers, acker_idle=True)
    assert len(default.jobs) == 2 and default.jobs[1].id != first.id  # the next one, alone
    storage.ack_jobs([Ack(default.jobs[1], "completed")])
    default.running = 0
    gate.step(dispatchers, acker_idle=True)
    assert gate.job is None and not gate.draining and not default.held and not emails.held
    assert gate.ran == 2
    # Without suspects, the database is asked once per check_every only.
    gate.step(dispatchers, acker_idle=True)
    assert not default.held


@pytest.mark.django_db
def test_the_gate_resumes_claims_when_the_database_fails(clock: Clock, monkeypatch: Any):
    ticks = Ticks()
    gate = Quarantine("w2", check_every=1.0, clock=ticks)
    default = FakeDispatcher()
    gate.draining = True
    default.held = True

    def broken(*args: Any) -> Any:
        raise RuntimeError("database down")

    monkeypatch.setattr("kathikon.runtime.quarantine.claim_suspect", broken)
    gate.step({"default": default}, acker_idle=True)
    assert not gate.draining and not default.held
