"""The lifeline: which jobs are rescued, how, fencing, and concurrent lifelines."""

from __future__ import annotations

import datetime as dt
from typing import Any
from unittest import mock

import pytest
from django.utils import timezone

import kathikon
from kathikon import signals, storage
from kathikon.exceptions import NodeSuperseded
from kathikon.models import Batch, Job, JobEvent, Node
from kathikon.runtime.lifeline import Lifeline
from kathikon.storage.acks import Ack
from kathikon.storage.quarantine import claim_suspect
from kathikon.storage.rescue import ERROR_KIND
from tests import workers
from tests.concurrency import run_at_once
from tests.runtime.test_services_periodic import Clock

RESCUE_AFTER = 60


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def lifeline(clock: Clock) -> Lifeline:
    return Lifeline("rescuer", clock=clock, rescue_after=RESCUE_AFTER)


def node(name: str, clock: Clock, *, silent_for: float = 0.0) -> None:
    """A node whose last heartbeat was ``silent_for`` seconds before the clock's time."""
    storage.register_node(name, "host", 1, {"default": 5},
                          at=clock.at - dt.timedelta(seconds=silent_for))


def held(node_name: str, count: int = 1, **options: Any) -> list[kathikon.Job]:
    """``count`` jobs claimed (running) by ``node_name``."""
    for _ in range(count):
        kathikon.insert(workers.Succeed, {}, **options)
    jobs = storage.claim_jobs(options.get("queue", "default"), count, node_name)
    assert len(jobs) == count
    return jobs


def state(job: kathikon.Job) -> str:
    return Job.objects.get(id=job.id).state


@pytest.mark.django_db
def test_rescues_the_jobs_of_a_silent_node_only(lifeline: Lifeline, clock: Clock):
    node("dead", clock, silent_for=RESCUE_AFTER + 5)
    node("alive", clock, silent_for=RESCUE_AFTER - 5)
    lost = held("dead", 2)
    kept = held("alive", 2)
    external = kathikon.insert(workers.Succeed, {})
    storage.claim_job(external.id, "dead")  # claimed (not running) counts too

    rescued = lifeline.run_once()

    assert {r.job.id for r in rescued} == {lost[0].id, lost[1].id, external.id}
    assert all(r.node == "dead" and r.state == "retryable" for r in rescued)
    assert [state(job) for job in kept] == ["running", "running"]
    job = Job.objects.get(id=lost[0].id)
    assert job.state == "retryable" and job.available_at == clock.at
    # A crash: nobody knows which job took the node down, so nobody is charged and every
    # job it held becomes a crash suspect (run alone next, see test_crash_budget.py).
    assert job.attempted_by == "dead" and job.attempts == 0 and job.suspect
    assert job.crashes == 0
    (error,) = job.errors
    assert error["kind"] == ERROR_KIND and error["attempt"] == 1 and error["traceback"] == ""
    assert "node dead stopped heartbeating" in error["message"]
    assert "the attempt does not count" in error["message"]
    assert error["at"] == clock.at.isoformat() and error["node"] == "dead"
    (event,) = JobEvent.objects.filter(job_id=job.id)
    assert (event.kind, event.actor, event.data["node"], event.data["state"]) == (
        "rescued", "rescuer", "dead", "retryable")
    assert lifeline.run_once() == []  # nothing left to rescue
    history = kathikon.history(job.id)
    (rescue,) = [item for item in history if item["event"] == "rescued"]
    assert (rescue["node"], rescue["state"], rescue["actor"]) == ("dead", "retryable", "rescuer")
    assert any(item["event"] == "failed" and item["kind"] == ERROR_KIND for item in history)


@pytest.mark.django_db
def test_a_rescued_job_is_claimed_and_completed_again(lifeline: Lifeline, clock: Clock):
    node("dead", clock, silent_for=3600)
    (job,) = held("dead")
    lifeline.run_once()
    assert storage.claim_jobs("default", 5, "other") == []  # a suspect: never with others
    again = claim_suspect(["default"], "other")
    assert again is not None and again.id == job.id
    assert again.attempts == 1 and again.lease == job.lease + 1
    assert storage.ack_jobs([Ack(again, "completed")]) == {job.id}


@pytest.mark.django_db
def test_out_of_attempts_an_external_runners_job_is_dead(lifeline: Lifeline, clock: Clock):
    (last,) = held("external-runner", max_attempts=1)  # no node row: the attempt was used
    Job.objects.filter(id=last.id).update(started_at=clock.at - dt.timedelta(hours=1))
    rescued = lifeline.run_once()
    assert [r.state for r in rescued] == ["dead"]
    job = Job.objects.get(id=last.id)
    assert job.state == "dead" and job.completed_at == clock.at
    assert job.errors[-1]["kind"] == ERROR_KIND and not job.suspect


@pytest.mark.django_db
def test_a_crashed_nodes_job_on_its_last_attempt_is_not_charged(lifeline: Lifeline,
                                                                 clock: Clock):
    node("dead", clock, silent_for=3600)
    (last,) = held("dead", max_attempts=1)
    assert [r.state for r in lifeline.run_once()] == ["retryable"]
    job = Job.objects.get(id=last.id)
    assert (job.state, job.attempts, job.suspect) == ("retryable", 0, True)


@pytest.mark.django_db
def test_a_stopped_node_is_rescued_at_once_whatever_its_heartbeat(lifeline: Lifeline,
                                                                   clock: Clock):
    node("gone", clock)
    (job,) = held("gone")
    assert lifeline.run_once() == []
    storage.mark_node_stopped("gone")
    (rescued,) = lifeline.run_once()
    assert rescued.job.id == job.id
    assert "node gone stopped while holding this job" in rescued.job.errors[-1]["message"]
    # It exited on purpose: nothing crashed, nobody is charged or suspected.
    assert (rescued.job.attempts, rescued.job.suspect) == (0, False)


@pytest.mark.django_db
def test_jobs_of_an_unknown_node_are_rescued_once_they_are_older_than_rescue_after(
        lifeline: Lifeline, clock: Clock):
    old, young = held("external-runner", 2)
    Job.objects.filter(id=old.id).update(
        started_at=clock.at - dt.timedelta(seconds=RESCUE_AFTER + 1))
    Job.objects.filter(id=young.id).update(
        started_at=clock.at - dt.timedelta(seconds=RESCUE_AFTER - 10))
    (rescued,) = lifeline.run_once()
    assert rescued.job.id == old.id
    assert "has no heartbeat record" in rescued.job.errors[-1]["message"]
    assert state(young) == "running"


@pytest.mark.django_db
def test_the_parent_of_an_open_batch_is_never_rescued(lifeline: Lifeline, clock: Clock):
    node("dead", clock, silent_for=3600)
    open_parent, closed_parent = held("dead", 2)
    Batch.objects.create(parent_job_id=open_parent.id, status="open", inserted_at=clock.at)
    Batch.objects.create(parent_job_id=closed_parent.id, status="closed", inserted_at=clock.at)
    assert [r.job.id for r in lifeline.run_once()] == [closed_parent.id]
    assert state(open_parent) == "running"


@pytest.mark.django_db
def test_rescue_is_fenced_against_a_job_that_moved_on(lifeline: Lifeline, clock: Clock):
    node("dead", clock, silent_for=3600)
    (job,) = held("dead")
    stale_copy = Job.objects.get(id=job.id)
    # Between the lifeline's read and its write, the job finished and was claimed again.
    storage.ack_jobs([Ack(job, "completed")])
    storage.retry_job(job.id)
    storage.claim_jobs("default", 1, "dead")
    with mock.patch("kathikon.storage.rescue._candidates", return_value=[stale_copy]):
        assert lifeline.run_once() == []
    current = Job.objects.get(id=job.id)
    assert current.state == "running" and current.errors == []
    assert not JobEvent.objects.filter(job_id=job.id, kind="rescued").exists()


@pytest.mark.django_db
def test_the_vanished_nodes_late_acknowledgement_is_refused(lifeline: Lifeline, clock: Clock):
    node("frozen", clock, silent_for=3600)
    (job,) = held("frozen")
    lifeline.run_once()
    assert storage.ack_jobs([Ack(job, "completed", result={"late": True})]) == set()
    assert storage.ack_jobs([Ack(job, "retryable", error={"kind": "x"})]) == set()
    rescued = Job.objects.get(id=job.id)
    assert rescued.state == "retryable" and rescued.result is None
    assert [e["kind"] for e in rescued.errors] == [ERROR_KIND]


@pytest.mark.django_db
def test_rescue_sends_job_rescued_and_wakes_the_queue(lifeline: Lifeline, clock: Clock):
    node("dead", clock, silent_for=3600)
    held("dead", 1)
    held("dead", 1, queue="emails")
    received: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        received.append({"sender": sender, **kwargs})

    signals.job_rescued.connect(receiver)
    try:
        with mock.patch("kathikon.storage.notify.notify",
                        wraps=storage.notify.notify) as notify:
            lifeline.run_once()
    finally:
        signals.job_rescued.disconnect(receiver)
    assert sorted(r["job"].queue for r in received) == ["default", "emails"]
    assert all(r["sender"] is workers.Succeed and r["node"] == "dead"
               and r["state"] == "retryable" for r in received)
    notify.assert_called_once_with("available", {"default", "emails"})


@pytest.mark.django_db
def test_registering_a_node_name_again_rescues_what_its_previous_process_held(clock: Clock):
    node("w1", clock)
    (job,) = held("w1")
    storage.register_node("w1", "host", 2, {"default": 5})  # the process restarted
    current = Job.objects.get(id=job.id)
    assert current.state == "retryable"
    assert "node w1 restarted" in current.errors[-1]["message"]


@pytest.mark.django_db
def test_the_lifeline_batches_and_defaults_to_the_database_clock(clock: Clock):
    node("dead", clock, silent_for=3600)
    held("dead", 5)
    small = Lifeline("rescuer", clock=clock, rescue_after=RESCUE_AFTER, limit=2)
    with mock.patch.object(storage, "rescue_jobs", wraps=storage.rescue_jobs) as rescue:
        assert len(small.run_once()) == 5
    assert rescue.call_count == 3
    default = Lifeline("rescuer")
    assert default.clock is storage.db_now and not default.clock_injected
    assert abs((default.now() - timezone.now()).total_seconds()) < 60


@pytest.mark.django_db
def test_a_live_node_with_a_skewed_host_clock_is_not_rescued(vendor: str):
    """Heartbeats and the cut-off both come from the database: host skew cannot matter."""
    if vendor == "sqlite":
        pytest.skip("SQLite runs on one host: the application's clock is the database's")
    skewed = timezone.now() - dt.timedelta(hours=1)  # the worker host is an hour behind
    with mock.patch("django.utils.timezone.now", return_value=skewed):
        storage.register_node("behind")
        storage.heartbeat("behind")
    held("behind", 1)
    assert Lifeline("rescuer", rescue_after=RESCUE_AFTER).run_once() == []


@pytest.mark.django_db(transaction=True)
def test_concurrent_lifelines_rescue_each_job_once(concurrent_db: None):
    clock = Clock()
    node("dead", clock, silent_for=3600)
    total = 120
    jobs = held("dead", total)
    results: list[list[Any]] = [[] for _ in range(4)]

    def rescue(slot: int) -> None:
        results[slot] = Lifeline(f"r{slot}", clock=clock, rescue_after=RESCUE_AFTER,
                                 limit=7).run_once()

    run_at_once(rescue, 4)
    rescued = [r.job.id for result in results for r in result]
    assert len(rescued) == len(set(rescued)) == total
    assert set(rescued) == {job.id for job in jobs}
    assert JobEvent.objects.filter(kind="rescued").count() == total
    assert all(len(job.errors) == 1 for job in Job.objects.all())


@pytest.mark.django_db
def test_after_a_database_outage_the_lifeline_lets_live_nodes_heartbeat_first(clock: Clock):
    node("everybody", clock, silent_for=3600)  # nobody could heartbeat during the outage
    (job,) = held("everybody")
    lifeline = Lifeline("rescuer", clock=clock, rescue_after=RESCUE_AFTER, settle_after=30)
    lifeline.failures = 1  # the previous run failed: the database was unreachable
    assert lifeline.run_once() == []
    lifeline.failures = 0
    assert lifeline.run_once() == []  # still settling
    lifeline._quiet_until = 0.0  # the settling time has passed; the node never came back
    assert [r.job.id for r in lifeline.run_once()] == [job.id]


def test_the_lifeline_starts_after_the_settling_time_and_heartbeats_never_back_off_long(
        settings: Any):
    settings.KATHIKON = {**settings.KATHIKON, "HEARTBEAT_INTERVAL": 2}
    from kathikon.runtime.heartbeat import Heartbeat

    assert Lifeline("n").initial_delay == 4 == Lifeline("n").settle_after
    assert Lifeline("n", initial_delay=0).initial_delay == 0
    heartbeat = Heartbeat("n")
    heartbeat.failures = 10
    assert heartbeat._next_delay() == 2


# -- the silent node's own row (issue 26, 6b) ------------------------------------------------

def status(name: str) -> str:
    return Node.objects.get(name=name).status


@pytest.mark.django_db
def test_a_silent_node_is_recorded_as_crashed_once_its_jobs_are_rescued(
        lifeline: Lifeline, clock: Clock, caplog: pytest.LogCaptureFixture):
    node("dead", clock, silent_for=RESCUE_AFTER + 5)
    node("idle", clock, silent_for=3600)  # silent, holding nothing: crashed all the same
    node("leaving", clock, silent_for=3600)
    storage.mark_node_stopping("leaving")  # died in its graceful shutdown
    node("gone", clock, silent_for=3600)
    storage.mark_node_stopped("gone")  # exited: stays stopped
    node("alive", clock, silent_for=RESCUE_AFTER - 5)
    lost = held("dead", 2)
    kept = held("alive")

    rescued = lifeline.run_once()

    assert {r.job.id for r in rescued} == {job.id for job in lost}
    assert {name: status(name) for name in ("dead", "idle", "leaving", "gone", "alive")} == {
        "dead": "crashed", "idle": "crashed", "leaving": "crashed", "gone": "stopped",
        "alive": "running"}
    assert state(kept[0]) == "running"
    for job in lost:  # charged as a crash, as before: the mark came after, and changes nothing
        row = Job.objects.get(id=job.id)
        assert (row.state, row.attempts, row.suspect, row.crashes) == ("retryable", 0, True, 0)
        assert "node dead stopped heartbeating" in row.errors[-1]["message"]
    marked = [r.getMessage() for r in caplog.records if "recorded as crashed" in r.getMessage()]
    assert sorted(m.split()[2] for m in marked) == ["dead", "idle", "leaving"]
    assert all(m.endswith("by rescuer") for m in marked)
    caplog.clear()
    assert lifeline.run_once() == []
    assert not [r for r in caplog.records if "recorded as crashed" in r.getMessage()]  # once


@pytest.mark.django_db
def test_a_frozen_node_recorded_as_crashed_beats_running_again(lifeline: Lifeline,
                                                                clock: Clock):
    storage.register_node("frozen", "host", 1, {"default": 5}, instance="i1",
                          at=clock.at - dt.timedelta(seconds=3600))
    (job,) = held("frozen")
    assert [r.job.id for r in lifeline.run_once()] == [job.id]
    assert status("frozen") == "crashed"
    # It wakes up: still its row (same instance), so its heartbeat says it lives again.
    assert storage.heartbeat("frozen", instance="i1", at=clock.at)
    row = Node.objects.get(name="frozen")
    assert (row.status, row.heartbeat_at) == ("running", clock.at)
    assert lifeline.run_once() == [] and status("frozen") == "running"
    # Its late ack of the rescued job is refused, as before.
    assert storage.ack_jobs([Ack(job, "completed")]) == set()
    # A crashed name another process took over: the old process learns it was superseded.
    Node.objects.filter(name="frozen").update(
        status="crashed", heartbeat_at=clock.at - dt.timedelta(seconds=3600))
    storage.register_node("frozen", "host", 2, {"default": 5}, instance="i2",
                          exclusive_after=RESCUE_AFTER)
    assert status("frozen") == "running"
    with pytest.raises(NodeSuperseded):
        storage.heartbeat("frozen", instance="i1")
    assert Node.objects.get(name="frozen").instance == "i2"


@pytest.mark.django_db
def test_a_crashed_node_stops_like_any_other_and_its_name_is_free(lifeline: Lifeline,
                                                                 clock: Clock):
    node("frozen", clock, silent_for=3600)
    lifeline.run_once()
    assert status("frozen") == "crashed"
    assert [n.name for n in storage.stale_nodes(clock.at)] == ["frozen"]
    assert storage.mark_node_stopping("frozen") and status("frozen") == "stopping"
    assert storage.mark_node_stopped("frozen") and status("frozen") == "stopped"


@pytest.mark.django_db
def test_after_a_database_outage_no_silent_node_is_recorded_as_crashed(clock: Clock):
    node("everybody", clock, silent_for=3600)
    lifeline = Lifeline("rescuer", clock=clock, rescue_after=RESCUE_AFTER, settle_after=30)
    lifeline.failures = 1
    assert lifeline.run_once() == []
    assert status("everybody") == "running"  # it may heartbeat again any moment
    lifeline.failures, lifeline._quiet_until = 0, 0.0
    lifeline.run_once()
    assert status("everybody") == "crashed"


@pytest.mark.django_db
def test_the_admin_and_kathikon_ops_show_a_crashed_node_for_what_it_is(
        lifeline: Lifeline, clock: Clock, admin_client: Any):
    from io import StringIO

    from django.core.management import call_command
    from django.urls import reverse

    def page() -> str:
        return admin_client.get(reverse("admin:kathikon_node_changelist")).content.decode()

    def summary() -> str:
        out = StringIO()
        call_command("kathikon_ops", "summary", stdout=out, stderr=StringIO())
        return out.getvalue()

    node("frozen", clock, silent_for=3600)
    kathikon.insert(workers.Succeed, {})
    lifeline.run_once()
    assert ">crashed</span>" in page() and ">silent</span>" not in page()
    assert "queue default: not served by any live worker" in summary()
    storage.heartbeat("frozen")  # it was only frozen (database clock: live again)
    assert ">running</span>" in page() and ">crashed</span>" not in page()
    assert "queue default: not served" not in summary()
