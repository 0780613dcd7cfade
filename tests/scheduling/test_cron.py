"""kathikon.cron (insert/update/fetch/list/cancel/pause/resume) and the CronScheduler service."""

from __future__ import annotations

import datetime as dt
import logging
import threading

import pytest
from django.core import checks
from django.db import connections
from django.test import override_settings

import kathikon
from kathikon import CronNotFound, InvalidJob, InvalidSchedule, cron, crontab, signals
from kathikon.models import CronSchedule, Job
from kathikon.runtime.scheduler import CronScheduler
from kathikon.storage import cron as store

from .conftest import UTC, Clock

SUCCEED = "tests.workers.Succeed"
pytestmark = pytest.mark.django_db


def at(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def scheduler(clock: Clock, **options) -> CronScheduler:
    return CronScheduler("test-node", clock=clock, interval=1, sync=False, **options)


def insert_at(clock: Clock, *args, **options) -> CronSchedule:
    """Insert a schedule as if at ``clock.now`` (its first tick is computed from then)."""
    schedule = cron.insert(*args, **options)
    from kathikon import crontab

    schedule.next_fire_at = crontab.next_tick(schedule.expression, schedule.timezone, clock.now)
    schedule.save()
    return schedule


# -- the API ---------------------------------------------------------------------------------


def test_insert_validates_and_computes_the_first_tick():
    schedule = cron.insert(SUCCEED, {"a": 1}, cron="@hourly", queue="emails",
                           timezone="Europe/Berlin", priority=5, max_attempts=3)
    assert schedule.expression == "0 * * * *"
    assert (schedule.queue, schedule.priority, schedule.max_attempts) == ("emails", 5, 3)
    assert schedule.timezone == "Europe/Berlin" and schedule.catch_up and not schedule.paused
    assert schedule.next_fire_at > dt.datetime.now(UTC)
    assert schedule.next_fire_at.minute == 0
    assert cron.fetch(schedule.id.hex) == schedule
    assert cron.fetch(schedule.id) == schedule


def test_schedule_with_cron_returns_the_schedule_id():
    schedule_id = kathikon.schedule(SUCCEED, {}, cron="*/5 * * * *")
    assert cron.fetch(schedule_id).expression == "*/5 * * * *"
    with pytest.raises(InvalidSchedule):
        kathikon.schedule(SUCCEED, {}, cron="every day")
    with pytest.raises(InvalidJob):
        kathikon.schedule(SUCCEED, {}, cron="@daily", in_seconds=5)


def test_default_timezone_comes_from_settings():
    assert cron.insert(SUCCEED, cron="@daily").timezone == "UTC"
    with override_settings(KATHIKON={"TIMEZONE": "America/New_York"}):
        assert cron.insert(SUCCEED, cron="@daily").timezone == "America/New_York"
    with override_settings(TIME_ZONE="Asia/Tokyo"):
        assert cron.insert(SUCCEED, cron="@daily").timezone == "Asia/Tokyo"


@pytest.mark.parametrize(("options", "error"), [
    ({"cron": "61 * * * *"}, InvalidSchedule),
    ({"cron": "* * * *"}, InvalidSchedule),
    ({"cron": "@sometimes"}, InvalidSchedule),
    ({"cron": "@daily", "timezone": "Nowhere/Atlantis"}, InvalidSchedule),
    ({"cron": "@daily", "catch_up": "yes"}, InvalidSchedule),
    ({"cron": "@daily", "name": ""}, InvalidSchedule),
    ({"cron": "@daily", "schedule_in": 5}, InvalidSchedule),
    ({"cron": "@daily", "queue": "bad queue"}, InvalidJob),
    ({"cron": "@daily", "priority": 1000}, InvalidJob),
    ({"cron": "@daily", "max_attempts": 0}, InvalidJob),
    # Past the columns (PostgreSQL's DataError, stored on SQLite) or zoneinfo's OSError.
    ({"cron": "0 0 * * " + ",".join(["1"] * 100)}, InvalidSchedule),
    ({"cron": "@daily", "timezone": "A" * 300}, InvalidSchedule),
    ({"cron": "@daily", "timezone": "Europe"}, InvalidSchedule),
    ({"cron": "@daily", "timezone": "x" * 65}, InvalidSchedule),
])
def test_insert_refuses_bad_input_and_inserts_nothing(options, error):
    with pytest.raises(error):
        cron.insert(SUCCEED, {}, **options)
    assert not CronSchedule.objects.exists()


def test_expressions_and_timezones_up_to_the_columns_are_stored():
    longest = "0 0 * * " + ",".join(["1"] * 96)  # 199 characters
    schedule = cron.insert(SUCCEED, {}, cron=longest + "  ", timezone="America/Argentina/Salta")
    assert cron.fetch(schedule.id.hex).expression == longest
    assert CronSchedule._meta.get_field("expression").max_length == crontab.MAX_EXPRESSION
    assert CronSchedule._meta.get_field("timezone").max_length == crontab.MAX_TIMEZONE
    with pytest.raises(InvalidSchedule, match="at most 200"):
        cron.update(schedule.id.hex, cron=longest + ",1")
    with pytest.raises(InvalidSchedule, match="at most 64"):
        cron.update(schedule.id.hex, timezone="A" * 300)
    assert not cron.is_valid(longest + ",1")
    assert cron.fetch(schedule.id.hex).expression == longest


def test_insert_refuses_bad_workers_and_args():
    with pytest.raises(InvalidJob):
        cron.insert("tests.workers.Nope", cron="@daily")
    with pytest.raises(InvalidJob):
        cron.insert(SUCCEED, {"when": dt.datetime.now()}, cron="@daily")
    assert not CronSchedule.objects.exists()


def test_names_are_unique():
    cron.insert(SUCCEED, cron="@daily", name="digest")
    with pytest.raises(InvalidSchedule):
        cron.insert(SUCCEED, cron="@hourly", name="digest")
    assert cron.fetch("digest").expression == "0 0 * * *"


def test_update_changes_the_next_fire_time():
    schedule = cron.insert(SUCCEED, cron="0 9 * * *", timezone="UTC")
    assert schedule.next_fire_at.hour == 9
    updated = cron.update(schedule.id.hex, cron="0 10 * * *")
    assert updated.expression == "0 10 * * *" and updated.next_fire_at.hour == 10
    updated = cron.update(schedule.id.hex, timezone="Asia/Kolkata")  # +05:30
    assert (updated.next_fire_at.hour, updated.next_fire_at.minute) == (4, 30)
    assert cron.fetch(schedule.id.hex).next_fire_at == updated.next_fire_at
    unchanged = cron.update(schedule.id.hex, args={"x": 1})
    assert unchanged.next_fire_at == updated.next_fire_at and unchanged.args == {"x": 1}


def test_update_refuses_bad_changes_and_keeps_the_schedule():
    schedule = cron.insert(SUCCEED, cron="0 9 * * *")
    for changes in ({"cron": "nope"}, {"timezone": "Mars/Base"}, {"bogus": 1},
                    {"priority": "high"}):
        with pytest.raises((InvalidSchedule, InvalidJob)):
            cron.update(schedule.id.hex, **changes)
    assert cron.fetch(schedule.id.hex).expression == "0 9 * * *"
    with pytest.raises(CronNotFound):
        cron.update("0" * 32, cron="@daily")


def test_list_fetch_cancel():
    daily = cron.insert(SUCCEED, cron="@daily")
    minutely = cron.insert(SUCCEED, cron="* * * * *", name="often")
    assert [s.id for s in cron.list()] == [minutely.id, daily.id]
    assert cron.cancel("often").id == minutely.id
    assert [s.id for s in cron.list()] == [daily.id]
    for ref in ("often", minutely.id.hex, "not-an-id", None):
        with pytest.raises(CronNotFound):
            cron.fetch(ref)
    with pytest.raises(CronNotFound):
        cron.cancel(minutely.id.hex)


def test_is_valid_and_preview():
    assert cron.is_valid("0 9 * * MON-FRI") and not cron.is_valid("0 9 * *")
    ticks = cron.next_fire_times("0 9 * * *", count=3, timezone="Europe/Berlin",
                                 after=at(2026, 3, 27, 12))
    assert ticks == [at(2026, 3, 28, 8), at(2026, 3, 29, 7), at(2026, 3, 30, 7)]


# -- the scheduler ---------------------------------------------------------------------------


def test_a_due_tick_enqueues_one_job_with_its_tick_and_schedule(clock):
    schedule = insert_at(clock, SUCCEED, {"k": "v"}, cron="0 10 * * *", queue="emails",
                         priority=3)
    service = scheduler(clock)
    assert service.run_once() == []
    clock.set(at(2026, 5, 13, 10, 0, 0, 500))
    [job] = service.run_once()
    assert (job.worker, job.args, job.queue, job.priority) == (SUCCEED, {"k": "v"}, "emails", 3)
    assert job.cron_id == schedule.id and job.scheduled_at == at(2026, 5, 13, 10)
    assert job.state == "available" and job.meta == {}
    stored = Job.objects.get()
    assert (stored.cron_id, stored.scheduled_at, stored.state) == (schedule.id,
                                                                   at(2026, 5, 13, 10),
                                                                   "available")
    schedule.refresh_from_db()
    assert schedule.last_fire_at == at(2026, 5, 13, 10)
    assert schedule.next_fire_at == at(2026, 5, 14, 10)
    assert service.run_once() == []  # the same moment again: nothing new
    assert Job.objects.count() == 1


def test_worker_defaults_apply_when_the_schedule_gives_none(clock):
    insert_at(clock, "tests.workers.Emails", cron="* * * * *")
    clock.advance(seconds=30)
    [job] = scheduler(clock).run_once()
    assert (job.queue, job.priority, job.max_attempts) == ("emails", 7, 4)


def test_two_nodes_on_the_same_tick_enqueue_one_job(clock):
    insert_at(clock, SUCCEED, cron="* * * * *")
    clock.advance(seconds=30)
    first, second = scheduler(clock), scheduler(clock)
    assert len(first.run_once()) == 1
    assert second.run_once() == []
    assert Job.objects.count() == 1


def test_the_unique_key_refuses_a_second_job_for_a_tick(clock):
    """The guarantee itself: even a node working from a stale read cannot insert twice."""
    schedule = insert_at(clock, SUCCEED, cron="* * * * *")
    clock.advance(seconds=30)
    stale = CronSchedule.objects.get()  # read before anyone fired
    assert len(scheduler(clock).run_once()) == 1
    tick = stale.next_fire_at
    from kathikon.jobspec import build_row

    row = build_row(SUCCEED, {}, {"cron_id": schedule.id, "scheduled_at": tick})
    assert store.insert_tick_job(row) is None
    assert not store.advance_schedule(stale, fired=tick, next_fire_at=tick)  # compare-and-set
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_nodes_fire_a_tick_once(clock, concurrent_db):
    schedule = insert_at(clock, SUCCEED, cron="* * * * *")
    clock.advance(seconds=30)
    barrier = threading.Barrier(4)
    results: list[int] = []
    errors: list[BaseException] = []

    def node() -> None:
        try:
            service = scheduler(clock, sweep_batches=False)
            barrier.wait(5)
            results.append(len(service.run_once()))
            # A node that read the schedule before it moved tries the insert anyway.
            from kathikon.jobspec import build_row

            row = build_row(SUCCEED, {}, {"cron_id": schedule.id,
                                          "scheduled_at": schedule.next_fire_at})
            results.append(0 if store.insert_tick_job(row) is None else 1)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=node) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert not errors
    assert sum(results) == 1
    assert Job.objects.filter(cron_id=schedule.id).count() == 1


def test_ticks_missed_while_no_worker_ran_fire_once(clock):
    schedule = insert_at(clock, SUCCEED, cron="* * * * *")  # next: 10:00
    service = scheduler(clock)
    clock.set(at(2026, 5, 13, 10, 0, 5))
    assert len(service.run_once()) == 1  # 10:00 on time
    clock.set(at(2026, 5, 13, 10, 30, 30))  # the worker was down for half an hour
    [job] = scheduler(clock).run_once()
    assert job.scheduled_at == at(2026, 5, 13, 10, 30)  # the latest missed tick, once
    assert job.meta == {"cron_missed_since": at(2026, 5, 13, 10, 1).isoformat()}
    schedule.refresh_from_db()
    assert schedule.next_fire_at == at(2026, 5, 13, 10, 31)
    assert scheduler(clock).run_once() == []
    assert Job.objects.count() == 2


def test_a_late_daily_tick_fires_once_on_restart(clock):
    insert_at(clock, SUCCEED, cron="0 3 * * *")  # next: 14 May 03:00
    clock.set(at(2026, 5, 16, 8))  # down for three days and some
    [job] = scheduler(clock).run_once()
    assert job.scheduled_at == at(2026, 5, 16, 3)
    assert CronSchedule.objects.get().next_fire_at == at(2026, 5, 17, 3)


def test_catch_up_off_skips_missed_ticks(clock):
    schedule = insert_at(clock, SUCCEED, cron="@hourly", catch_up=False)  # next: 10:00
    clock.set(at(2026, 5, 13, 12, 30))  # 10:00, 11:00 and 12:00 missed
    assert scheduler(clock).run_once() == []
    schedule.refresh_from_db()
    assert schedule.next_fire_at == at(2026, 5, 13, 13) and schedule.last_fire_at is None
    clock.set(at(2026, 5, 13, 13, 0, 2))
    assert len(scheduler(clock).run_once()) == 1  # on time again


def test_catch_up_off_still_fires_the_current_tick(clock):
    insert_at(clock, SUCCEED, cron="* * * * *", catch_up=False)
    clock.set(at(2026, 5, 13, 10, 5, 10))  # 10:00..10:04 missed, 10:05 is on time
    [job] = scheduler(clock).run_once()
    assert job.scheduled_at == at(2026, 5, 13, 10, 5)


def test_cancel_stops_it(clock):
    schedule = insert_at(clock, SUCCEED, cron="* * * * *")
    cron.cancel(schedule.id.hex)
    clock.advance(minutes=5)
    assert scheduler(clock).run_once() == []
    assert not Job.objects.exists()


def test_pause_and_resume(clock):
    schedule = insert_at(clock, SUCCEED, cron="* * * * *")
    assert cron.pause(schedule.id.hex).paused
    clock.advance(minutes=5)
    assert scheduler(clock).run_once() == []
    resumed = cron.resume(schedule.id.hex)
    assert not resumed.paused
    assert resumed.next_fire_at > dt.datetime.now(UTC)  # ticks missed while paused are dropped


def test_update_takes_effect_for_the_next_tick(clock):
    schedule = insert_at(clock, SUCCEED, cron="0 10 * * *")
    clock.set(at(2026, 5, 13, 10, 0, 1))
    scheduler(clock).run_once()
    cron.update(schedule.id.hex, args={"v": 2}, queue="emails")
    CronSchedule.objects.filter(pk=schedule.pk).update(next_fire_at=at(2026, 5, 14, 10))
    clock.set(at(2026, 5, 14, 10, 0, 1))
    [job] = scheduler(clock).run_once()
    assert (job.args, job.queue) == ({"v": 2}, "emails")


def test_cron_enqueued_signal(clock):
    schedule = insert_at(clock, SUCCEED, cron="* * * * *")
    seen = []

    def receiver(sender, **kwargs):
        seen.append((sender, kwargs["schedule"].id, kwargs["job"].scheduled_at, kwargs["tick"]))

    signals.cron_enqueued.connect(receiver)
    try:
        clock.advance(seconds=40)
        scheduler(clock).run_once()
    finally:
        signals.cron_enqueued.disconnect(receiver)
    tick = at(2026, 5, 13, 10)
    assert seen == [(CronSchedule, schedule.id, tick, tick)]


def test_dst_hourly_schedule_fired_by_a_scheduler_on_a_moving_clock(clock):
    """Europe/Berlin, fall back: every real hour fires once, the repeated 02:00 twice."""
    clock.set(at(2026, 10, 24, 21, 50))
    insert_at(clock, SUCCEED, cron="@hourly", timezone="Europe/Berlin")
    service = scheduler(clock, misfire_grace=3600)  # the clock moves in 20-minute steps
    fired = []
    while clock.now < at(2026, 10, 25, 4, 10):
        fired += service.run_once()
        clock.advance(minutes=20)
    assert [j.scheduled_at for j in fired] == [at(2026, 10, 24, 22), at(2026, 10, 24, 23),
                                               *(at(2026, 10, 25, h) for h in range(4))]
    assert all(not j.meta for j in fired)  # none of them counted as missed


@pytest.mark.parametrize(("tz", "start", "expected"), [
    ("Europe/Berlin", at(2026, 3, 28, 12), at(2026, 3, 29, 1, 30)),     # 03:30 CEST
    ("Europe/Berlin", at(2026, 10, 24, 12), at(2026, 10, 25, 0, 30)),   # 02:30 CEST, once
    ("America/New_York", at(2026, 3, 7, 12), at(2026, 3, 8, 7, 30)),    # 03:30 EDT
    ("America/New_York", at(2026, 10, 31, 12), at(2026, 11, 1, 7, 30)), # 02:30 EST
])
def test_dst_daily_0230_fires_once_on_the_transition_day(clock, tz, start, expected):
    clock.set(start)
    insert_at(clock, SUCCEED, cron="30 2 * * *", timezone=tz)
    service = scheduler(clock, misfire_grace=3600)
    fired = []
    while clock.now < start + dt.timedelta(hours=24):
        fired += service.run_once()
        clock.advance(minutes=30)
    assert [j.scheduled_at for j in fired] == [expected]


def test_a_schedule_whose_worker_disappeared_is_skipped_with_a_log(clock, caplog):
    schedule = insert_at(clock, SUCCEED, cron="* * * * *")
    CronSchedule.objects.filter(pk=schedule.pk).update(worker="tests.workers.Gone")
    clock.advance(seconds=40)
    with caplog.at_level(logging.ERROR, logger="kathikon.runtime"):
        assert scheduler(clock).run_once() == []
    assert "skipped the tick" in caplog.text
    schedule.refresh_from_db()
    assert schedule.next_fire_at == at(2026, 5, 13, 10, 1)  # moved on: no error loop


# -- static schedules ------------------------------------------------------------------------


STATIC = [
    {"name": "digest", "cron": "0 3 * * *", "worker": SUCCEED, "args": {"kind": "daily"},
     "queue": "emails", "timezone": "Europe/Berlin"},
    {"name": "ping", "cron": "@hourly", "worker": SUCCEED},
]


def test_static_schedules_are_created_updated_and_removed_by_name(clock):
    api = cron.insert(SUCCEED, cron="@daily", name="made-at-runtime")
    report = cron.sync_static(STATIC, now=clock.now)
    assert sorted(report["created"]) == ["digest", "ping"]
    digest = cron.fetch("digest")
    assert digest.static and digest.queue == "emails" and digest.args == {"kind": "daily"}
    assert digest.next_fire_at == at(2026, 5, 14, 1)  # 03:00 CEST
    ping_next = cron.fetch("ping").next_fire_at

    changed = [{**STATIC[0], "cron": "0 4 * * *"}, {**STATIC[1], "args": {"x": 1}}]
    clock.advance(minutes=1)
    report = cron.sync_static(changed, now=clock.now)
    assert sorted(report["updated"]) == ["digest", "ping"]
    assert cron.fetch("digest").next_fire_at == at(2026, 5, 14, 2)
    assert cron.fetch("ping").next_fire_at == ping_next  # same expression: keeps its place
    assert cron.sync_static(changed, now=clock.now)["unchanged"] == ["digest", "ping"]

    report = cron.sync_static([changed[1]], now=clock.now)
    assert report["removed"] == ["digest"]
    assert sorted(s.name for s in cron.list()) == ["made-at-runtime", "ping"]
    assert cron.fetch(api.id.hex).expression == "0 0 * * *"  # API schedule untouched
    cron.sync_static([], now=clock.now)
    assert [s.name for s in cron.list()] == ["made-at-runtime"]


def test_static_sync_keeps_an_operator_pause_and_leaves_api_names_alone(clock, caplog):
    cron.sync_static(STATIC, now=clock.now)
    cron.pause("ping")
    cron.sync_static(STATIC, now=clock.now)
    assert cron.fetch("ping").paused
    cron.insert(SUCCEED, cron="@daily", name="taken")
    with caplog.at_level(logging.WARNING, logger="kathikon"):
        report = cron.sync_static([{"name": "taken", "cron": "@hourly", "worker": SUCCEED}],
                                  now=clock.now)
    assert report["skipped"] == ["taken"]
    assert not cron.fetch("taken").static and cron.fetch("taken").expression == "0 0 * * *"


def test_bad_static_entries_are_skipped_at_runtime_and_reported_by_a_check(clock, caplog):
    entries = [
        {"name": "ok", "cron": "@daily", "worker": SUCCEED},
        {"name": "bad-cron", "cron": "every day", "worker": SUCCEED},
        {"name": "bad-tz", "cron": "@daily", "worker": SUCCEED, "timezone": "Mars/Base"},
        {"name": "bad-worker", "cron": "@daily", "worker": "tests.workers.Nope"},
        {"cron": "@daily", "worker": SUCCEED},
        {"name": "ok", "cron": "@hourly", "worker": SUCCEED},
        {"name": "extra", "cron": "@daily", "worker": SUCCEED, "colour": "red"},
        "not a dict",
        {"name": "long", "cron": "0 0 * * " + ",".join(["1"] * 100), "worker": SUCCEED},
        {"name": "long-tz", "cron": "@daily", "worker": SUCCEED, "timezone": "A" * 300},
    ]
    with caplog.at_level(logging.ERROR, logger="kathikon"):
        report = cron.sync_static(entries, now=clock.now)
    assert report["created"] == ["ok"] and report["skipped"] == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert "KATHIKON['CRON'][1] skipped" in caplog.text
    assert [s.name for s in cron.list()] == ["ok"]
    with override_settings(KATHIKON={"CRON": entries}):
        errors = [m for m in checks.run_checks() if m.id == "kathikon.E013"]
    assert [m.msg.split(":")[0] for m in errors] == [f"KATHIKON['CRON'][{i}]"
                                                     for i in range(1, 10)]
    assert "twice" in errors[4].msg


def test_the_scheduler_syncs_settings_on_its_first_run(clock):
    static = [{"name": "soon", "cron": "* * * * *", "worker": SUCCEED}]
    service = CronScheduler("n", clock=clock, interval=1, static=static)
    assert service.run_once() == []
    assert service.synced["created"] == ["soon"]
    clock.advance(seconds=31)
    assert len(service.run_once()) == 1
    with override_settings(KATHIKON={"CRON": static}):
        fresh = CronScheduler("m", clock=clock, interval=1)
        fresh.run_once()
        assert fresh.synced["unchanged"] == ["soon"]
