"""Whole-process tests: real ``kathikon_worker`` processes firing cron ticks and draining
batches. PostgreSQL: 3 processes; MariaDB and SQLite: 2."""

from __future__ import annotations

import datetime as dt
import signal

import pytest
from django.db.models import Count

import kathikon
from kathikon import Batch, storage
from kathikon.models import Batch as BatchRow
from kathikon.models import CronSchedule, Job
from testproject.demo.models import Execution

from .conftest import wait_until

pytestmark = pytest.mark.slow

RECORD = "testproject.demo.workers.Record"
FAST = {"POLL_INTERVAL": 0.2, "SCHEDULER_INTERVAL": 0.1, "HEARTBEAT_INTERVAL": 1,
        "RESCUE_AFTER": 30}


def process_count(vendor: str) -> int:
    return 3 if vendor == "postgresql" else 2


def start_workers(worker_processes, count: int, **settings) -> list:
    workers = worker_processes.start_many(count, settings={**FAST, **settings})
    for worker in workers:
        worker.wait_for_log("kathikon worker", timeout=20)
    return workers


def stop(workers) -> None:
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(15) == 0, worker.log()


def test_due_ticks_fire_exactly_once_across_processes(worker_processes, vendor):
    """20 schedules fall due at the same instant while every process's scheduler polls."""
    schedules = [kathikon.cron.insert(RECORD, {"n": n}, cron="0 0 1 1 *") for n in range(20)]
    workers = start_workers(worker_processes, process_count(vendor))
    tick = storage.db_now().replace(microsecond=0) - dt.timedelta(seconds=1)
    CronSchedule.objects.update(next_fire_at=tick)  # all due now, in one statement
    wait_until(lambda: Execution.objects.count() >= 20, 20, message="20 tick jobs ran")
    wait_until(lambda: not CronSchedule.objects.filter(next_fire_at__lte=tick).exists(), 5)
    # Every process's scheduler gets several more chances to fire a tick twice.
    first = Execution.objects.order_by("-at").values_list("at", flat=True).first()
    wait_until(lambda: storage.db_now() > first + dt.timedelta(seconds=1), 5)
    stop(workers)
    per_schedule = dict(Job.objects.filter(cron__isnull=False).values_list("cron_id")
                        .annotate(n=Count("id")))
    assert per_schedule == {s.id: 1 for s in schedules}
    assert set(Job.objects.values_list("scheduled_at", flat=True)) == {tick}
    assert max(Execution.objects.values_list("job_id").annotate(n=Count("id"))
               .values_list("n", flat=True)) == 1
    assert all(s.next_fire_at.year == tick.year + 1 for s in CronSchedule.objects.all())


def test_a_restart_after_downtime_fires_a_missed_tick_once(worker_processes, vendor):
    schedule = kathikon.cron.insert(RECORD, {}, cron="@hourly")
    now = storage.db_now()
    last = now.replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=5)
    # As if the workers had stopped five hours ago, right after firing a tick.
    CronSchedule.objects.filter(pk=schedule.pk).update(
        last_fire_at=last, next_fire_at=last + dt.timedelta(hours=1))
    workers = start_workers(worker_processes, process_count(vendor))
    wait_until(lambda: Execution.objects.exists(), 20, message="the missed tick ran")
    wait_until(lambda: storage.db_now() > now + dt.timedelta(seconds=2), 5)
    stop(workers)
    caught_up = Job.objects.filter(cron_id=schedule.id, meta__has_key="cron_missed_since")
    assert caught_up.count() == 1  # once, not once per missed tick (5)
    job = caught_up.get()
    assert job.scheduled_at == now.replace(minute=0, second=0, microsecond=0)
    assert job.state == "completed"
    # At most the next on-time tick besides it (if the test crossed the hour).
    assert Job.objects.filter(cron_id=schedule.id).count() <= 2


def test_a_batch_drained_by_several_processes_calls_back_once(worker_processes, vendor):
    ok, dead, cancelled = {"postgresql": (480, 15, 5)}.get(vendor, (180, 15, 5))
    # The first children hold each process's threads for longer than a poll (the rest are
    # fast and buffered), so the first process to claim cannot drain the batch alone.
    slow = 10 * process_count(vendor)
    specs = [(RECORD, {"n": n, "sleep": 0.3} if n < slow else {"n": n}) for n in range(ok)]
    specs += [("testproject.demo.workers.Reject", {}) for _ in range(dead)]
    specs += [(RECORD, {"cancel": True}, {"schedule_in": 3600}) for _ in range(cancelled)]
    workers = start_workers(worker_processes, process_count(vendor))  # all up: all take part
    batch = Batch.start(None, specs, on_complete=(RECORD, {"callback": True}, {"queue": "emails"}))
    for job in Job.objects.filter(batch_id=batch.id, state="scheduled"):
        kathikon.cancel(job.id)
    wait_until(lambda: Job.objects.filter(args__callback=True, state="completed").exists(), 60,
               message="the batch callback ran")
    stop(workers)
    [callback] = Job.objects.filter(args__callback=True)
    assert callback.args == {"callback": True, "batch_id": batch.id, "completed": ok,
                             "dead": dead, "cancelled": cancelled}
    assert Batch.fetch(batch.id).status == "completed"
    executed = {e for e in Execution.objects.values_list("node", flat=True)}
    assert len(executed) == len(workers)  # every process ran children
    assert BatchRow.objects.get().callback_job_id == callback.id


def test_a_parent_stays_running_in_a_worker_until_its_batch_closes(worker_processes, vendor):
    parent = kathikon.insert("tests.scheduling.workers.OpensBatch", {"children": 20})
    workers = start_workers(worker_processes, process_count(vendor))
    wait_until(lambda: Job.objects.filter(batch__isnull=False, state="completed").count() == 20,
               20, message="the children ran")
    assert kathikon.fetch(parent.id).state == "running"
    Batch.close(BatchRow.objects.get().id)
    assert kathikon.fetch(parent.id).state == "completed"
    wait_until(lambda: Job.objects.filter(args__from="parent", state="completed").exists(), 20,
               message="the callback ran")
    stop(workers)
    assert Job.objects.filter(args__from="parent").get().args["completed"] == 20
