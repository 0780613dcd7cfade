"""PeriodicService, Promoter, Pruner and Heartbeat: deterministic ``run_once`` with a clock."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any
from unittest import mock

import pytest
from django.db import connections
from django.utils import timezone

import kathikon
from kathikon import storage
from kathikon.models import Job, JobEvent, Node
from kathikon.runtime.heartbeat import Heartbeat
from kathikon.runtime.promoter import Promoter
from kathikon.runtime.pruner import Pruned, Pruner
from kathikon.runtime.service import PeriodicService
from tests import workers
from tests.concurrency import run_at_once


class Clock:
    """A frozen clock: ``clock()`` returns the same instant until ``advance()``."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self.at = start or timezone.now()

    def __call__(self) -> dt.datetime:
        return self.at

    def advance(self, seconds: float) -> dt.datetime:
        self.at += dt.timedelta(seconds=seconds)
        return self.at


@pytest.fixture
def clock() -> Clock:
    return Clock()


# -- PeriodicService ---------------------------------------------------------------------------


class Counter(PeriodicService):
    name = "counter"

    def __init__(self, node: str, *, fail_on: set[int] | None = None, **options: Any) -> None:
        super().__init__(node, **options)
        self.fail_on = fail_on or set()
        self.seen: list[int] = []

    def run_once(self) -> int:
        if self.runs in self.fail_on:
            raise RuntimeError(f"run {self.runs} fails")
        self.seen.append(self.runs)
        return self.runs


def test_service_runs_until_stopped_and_survives_failures():
    service = Counter("n", interval=0.01, fail_on={1, 2}, max_backoff=0.05).start()
    try:
        assert service.wait_for_runs(5, timeout=10)
        assert service.running
    finally:
        service.stop()
    assert service.join(5)
    assert not service.running
    assert service.seen[:2] == [0, 3]  # runs 1 and 2 raised; the loop carried on
    assert service.failures == 0 and isinstance(service.last_error, RuntimeError)


def test_failures_back_off_exponentially_up_to_the_cap():
    service = Counter("n", interval=1, max_backoff=5)
    assert service._next_delay() == 1
    service.failures = 1
    assert service._next_delay() == 2
    service.failures = 10
    assert service._next_delay() == 5


def test_wake_runs_early_and_stop_interrupts_the_wait():
    service = Counter("n", interval=3600).start()
    try:
        assert service.wait_for_runs(1, timeout=5)
        service.wake()
        assert service.wait_for_runs(2, timeout=5)  # long before the hour is up
    finally:
        service.stop()
    assert service.join(5)


def test_a_failed_run_closes_the_connection_so_the_next_one_reconnects():
    service = Counter("n", interval=0.01, fail_on={0})
    closed = threading.Event()
    with mock.patch.object(connections["default"].__class__, "close",
                           side_effect=lambda *a, **k: closed.set()):
        service._run_guarded()
    assert closed.is_set() and service.failures == 1


@pytest.mark.django_db(transaction=True)
def test_reset_connection_closes_it_but_never_inside_a_transaction():
    from django.db import transaction

    from kathikon.storage import vendor

    connection = vendor.connection()
    connection.ensure_connection()
    with transaction.atomic():
        vendor.reset_connection()
        assert connection.connection is not None  # the owner's transaction goes on
    vendor.reset_connection()
    assert connection.connection is None  # the next query reconnects
    assert Job.objects.count() == 0
    with mock.patch.object(connection.__class__, "close", side_effect=OSError("gone")):
        vendor.reset_connection()  # a close that fails is logged, not raised


def test_the_injected_clock_is_the_services_time(clock: Clock):
    service = Counter("n", clock=clock)
    assert service.now() == clock.at and service.clock_injected
    assert not Counter("n").clock_injected


# -- Promoter ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_promoter_promotes_due_jobs_in_batches(clock: Clock):
    for _ in range(7):
        kathikon.insert(workers.Succeed, {}, schedule_in=60)
    later = kathikon.insert(workers.Succeed, {}, schedule_in=600)
    promoter = Promoter("n", clock=clock, limit=3)
    assert promoter.run_once() == 0
    clock.advance(120)
    with mock.patch.object(storage, "promote_scheduled",
                           wraps=storage.promote_scheduled) as promote:
        assert promoter.run_once() == 7
    assert promote.call_count == 3  # 3 + 3 + 1: stops at the first short batch
    assert storage.count_by_state()["available"] == 7
    assert Job.objects.get(id=later.id).state == "scheduled"


@pytest.mark.django_db
def test_promoter_defaults_to_the_scheduler_interval(settings: Any):
    settings.KATHIKON = {**settings.KATHIKON, "SCHEDULER_INTERVAL": 0.25}
    assert Promoter("n").interval == 0.25


# -- Pruner ------------------------------------------------------------------------------------


def _finish(job: kathikon.Job, state: str, at: dt.datetime) -> None:
    Job.objects.filter(id=job.id).update(state=state, completed_at=at)


@pytest.mark.django_db
def test_pruner_deletes_old_terminal_jobs_in_chunks(clock: Clock):
    old = clock.at - dt.timedelta(days=8)
    stale = [kathikon.insert(workers.Succeed, {}) for _ in range(5)]
    for job, state in zip(stale, ["completed", "dead", "cancelled", "completed", "dead"],
                          strict=True):
        _finish(job, state, old)
    storage.record_event(stale[0].id, "retried")
    recent = kathikon.insert(workers.Succeed, {})
    _finish(recent, "completed", clock.at - dt.timedelta(days=1))
    pending = kathikon.insert(workers.Succeed, {})
    Job.objects.filter(id=pending.id).update(completed_at=old)  # not terminal: kept

    pruner = Pruner("n", clock=clock, retention=7 * 86400, limit=2)
    with mock.patch.object(storage, "prune_jobs", wraps=storage.prune_jobs) as prune:
        assert pruner.run_once() == Pruned(jobs=5, nodes=0)
    assert prune.call_count == 3  # chunks of 2, 2, 1
    assert set(Job.objects.values_list("id", flat=True)) == {recent.id, pending.id}
    assert not JobEvent.objects.filter(job_id=stale[0].id).exists()


@pytest.mark.django_db
def test_pruner_stops_after_max_chunks_and_finishes_next_run(clock: Clock):
    for _ in range(5):
        _finish(kathikon.insert(workers.Succeed, {}), "completed",
                clock.at - dt.timedelta(hours=2))
    pruner = Pruner("n", clock=clock, retention=3600, limit=2, max_chunks=1)
    assert pruner.run_once().jobs == 2
    assert pruner.run_once().jobs == 2
    assert pruner.run_once().jobs == 1


@pytest.mark.django_db
def test_pruner_forgets_long_stopped_and_long_silent_nodes(clock: Clock):
    day = dt.timedelta(days=1)
    storage.register_node("alive", at=clock.at)
    storage.register_node("silent", at=clock.at - 2 * day)
    storage.register_node("stopped-long-ago", at=clock.at - 3 * day)
    storage.mark_node_stopped("stopped-long-ago", at=clock.at - 2 * day)
    storage.register_node("stopped-recently", at=clock.at - 2 * day)
    storage.mark_node_stopped("stopped-recently", at=clock.at - dt.timedelta(hours=1))
    pruner = Pruner("n", clock=clock, node_retention=86400)
    assert pruner.run_once().nodes == 2
    assert set(Node.objects.values_list("name", flat=True)) == {"alive", "stopped-recently"}


def test_pruner_node_retention_is_never_shorter_than_ten_rescue_periods(settings: Any):
    settings.KATHIKON = {**settings.KATHIKON, "RESCUE_AFTER": 20000}
    assert Pruner("n").node_retention == 200000
    assert 0 <= Pruner("n", interval=10).initial_delay <= 10
    assert Pruner("n", initial_delay=0).initial_delay == 0


# -- Heartbeat and node rows -------------------------------------------------------------------


@pytest.mark.django_db
def test_register_node_upserts_a_running_node():
    node = storage.register_node("n1", "host", 42, {"default": 10})
    assert (node.status, node.hostname, node.pid, node.queues) == ("running", "host", 42,
                                                                   {"default": 10})
    storage.mark_node_stopped("n1")
    node = storage.register_node("n1", "host", 43, ["default"])
    assert node.status == "running" and node.pid == 43 and node.stopped_at is None
    assert Node.objects.count() == 1


@pytest.mark.django_db
def test_heartbeat_and_node_times_use_the_database_clock(vendor: str):
    storage.register_node("n1")
    skewed = timezone.now() - dt.timedelta(days=365)  # this host's clock is a year behind
    with mock.patch("django.utils.timezone.now", return_value=skewed):
        assert Heartbeat("n1").run_once() is True
        beat = Node.objects.get(name="n1").heartbeat_at
        storage.mark_node_stopped("n1")
        stopped = Node.objects.get(name="n1").stopped_at
    if vendor == "sqlite":  # one host: the application's clock is the database's
        assert beat == skewed and stopped == skewed
    else:
        assert abs((beat - storage.db_now()).total_seconds()) < 60
        assert abs((stopped - storage.db_now()).total_seconds()) < 60


@pytest.mark.django_db
def test_heartbeat_with_an_injected_clock_stamps_that_time(clock: Clock):
    storage.register_node("n1")
    clock.advance(-3600)
    Heartbeat("n1", clock=clock).run_once()
    assert Node.objects.get(name="n1").heartbeat_at == clock.at


@pytest.mark.django_db
def test_heartbeat_writes_a_missing_node_row_again_without_rescuing_its_jobs():
    storage.register_node("n1")
    kathikon.insert(workers.Succeed, {})
    (job,) = storage.claim_jobs("default", 1, "n1")
    Node.objects.all().delete()
    heartbeat = Heartbeat("n1", hostname="h", pid=7, queues={"default": 1})
    assert heartbeat.run_once() is False
    node = Node.objects.get(name="n1")
    assert (node.status, node.hostname, node.pid) == ("running", "h", 7)
    assert Job.objects.get(id=job.id).state == "running"
    assert heartbeat.run_once() is True


@pytest.mark.django_db
def test_heartbeat_warns_when_it_was_silent_longer_than_rescue_after(caplog: Any):
    storage.register_node("n1")
    heartbeat = Heartbeat("n1", rescue_after=10)
    heartbeat.run_once()
    heartbeat._last_beat -= 60  # as if the process had been frozen for a minute
    heartbeat.run_once()
    assert "was silent for 60s" in caplog.text


@pytest.mark.django_db
def test_mark_node_stopping_keeps_heartbeats_going():
    storage.register_node("n1")
    assert storage.mark_node_stopping("n1")
    assert storage.heartbeat("n1")
    assert Node.objects.get(name="n1").status == "stopping"
    assert storage.fetch_node("n1") is not None and storage.fetch_node("nope") is None


# -- every node runs them at once --------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_concurrent_promoters_and_pruners_each_touch_a_job_once(concurrent_db: None):
    clock = Clock()
    kathikon.insert_many([(workers.Succeed, {"i": i}, {"schedule_in": 30}) for i in range(300)])
    clock.advance(60)
    promoted = run_at_once(
        lambda slot: Promoter(f"n{slot}", clock=clock, limit=25).run_once(), threads=4)
    assert sum(count or 0 for count in promoted) == 300
    assert storage.count_by_state()["available"] == 300

    Job.objects.update(state="completed", completed_at=clock.at - dt.timedelta(days=30))
    pruned = run_at_once(
        lambda slot: Pruner(f"n{slot}", clock=clock, limit=25, max_chunks=1000).run_once().jobs,
        threads=4)
    assert sum(count or 0 for count in pruned) == 300
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_service_survives_its_connection_being_killed(postgres_only: None):
    storage.register_node("n1")
    heartbeat = Heartbeat("n1", interval=0.05).start()
    try:
        assert heartbeat.wait_for_runs(2, timeout=10)
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        failed_at = heartbeat.runs
        assert heartbeat.wait_for_runs(failed_at + 5, timeout=10)
        assert heartbeat.last_error is not None  # a run failed on the dead connection…
        assert heartbeat.failures == 0 and heartbeat.last_result is True  # …then reconnected
    finally:
        heartbeat.stop()
        assert heartbeat.join(5)


@pytest.mark.django_db
def test_stale_and_live_nodes(clock: Clock):
    storage.register_node("fresh", at=clock.at)
    storage.register_node("silent", at=clock.at - dt.timedelta(minutes=5))
    storage.register_node("gone", at=clock.at)
    storage.mark_node_stopped("gone", at=clock.at)
    cutoff = clock.at - dt.timedelta(minutes=1)
    assert {n.name for n in storage.stale_nodes(cutoff)} == {"silent", "gone"}
    assert [n.name for n in storage.live_nodes(cutoff)] == ["fresh"]
