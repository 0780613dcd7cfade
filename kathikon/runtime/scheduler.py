"""Internal: the cron scheduler — due ticks of cron schedules become jobs, once each.

Runs every ``SCHEDULER_INTERVAL`` on every node (no leader). On its first run
it syncs the static schedules of ``KATHIKON["CRON"]``. Each run then takes the
due schedules one short transaction at a time: lock the schedule row (``SKIP
LOCKED``, so nodes split the work), insert the tick's job with ``cron_id`` and
``scheduled_at = tick`` — the unique key on those two columns makes a second
insert of the same tick fail, so a tick fires exactly once however many nodes
try — and move the schedule to its next tick with a compare-and-set.

Missed ticks (no worker ran at the time): the latest missed tick fires once on
the next run, not once per missed tick; with ``catch_up=False`` on the schedule
missed ticks are skipped. A tick counts as missed when the scheduler sees it
more than ``misfire_grace`` seconds late (default 60).

Each run also completes closed batches whose children have all finished (a
safety net: completion is normally detected when the last child finishes).
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from typing import Any

from kathikon import conf, crontab, signals
from kathikon.exceptions import InvalidJob, InvalidSchedule, KathikonError
from kathikon.jobspec import JobRow, build_row, worker_class
from kathikon.models import CronSchedule, Job
from kathikon.runtime.service import PeriodicService
from kathikon.storage import cron as store
from kathikon.storage import vendor

logger = logging.getLogger("kathikon.runtime")


class CronScheduler(PeriodicService):
    """Fire due cron ticks, exactly once across all nodes.

    Options: ``interval`` (default ``SCHEDULER_INTERVAL``), ``clock``,
    ``misfire_grace`` (seconds late before a tick counts as missed, 60),
    ``limit`` (schedules per run, 100), ``sync`` (sync ``KATHIKON["CRON"]`` on
    the first run, True), ``static`` (the entries to sync; default the setting),
    ``sweep_batches`` (complete finished batches each run, True).
    Signals: ``cron_enqueued(sender=CronSchedule, schedule, job, tick)``.
    """

    name = "cron"

    def __init__(self, node: str, *, misfire_grace: float = 60.0, limit: int = 100,
                 sync: bool = True, static: list[dict[str, Any]] | None = None,
                 sweep_batches: bool = True, **options: Any) -> None:
        super().__init__(node, **options)
        self.misfire_grace = dt.timedelta(seconds=misfire_grace)
        self.limit = limit
        self.sync = sync
        self.static = static
        self.sweep_batches = sweep_batches
        self.synced: dict[str, Any] | None = None
        self.already_fired = 0  # ticks another node inserted first (the unique key refused ours)

    def default_interval(self) -> float:
        return conf.scheduler_interval()

    def run_once(self) -> list[Job]:
        """Sync static schedules (first run), fire every due tick; returns the jobs inserted."""
        if self.sync and self.synced is None:
            self.synced = self.sync_static()
        now = self.now()
        fired = []
        for schedule_id in store.due_schedule_ids(now, limit=self.limit):
            if self.stopping:
                break
            job = self.fire(schedule_id, now)
            if job is not None:
                fired.append(job)
        if self.sweep_batches:
            self._sweep_batches()
        return fired

    def sync_static(self) -> dict[str, Any]:
        from kathikon.cron import sync_static

        report = sync_static(self.static, now=self.now())
        changes = {key: names for key, names in report.items() if names and key != "unchanged"}
        if changes:
            logger.info("kathikon: static cron schedules synced: %s", changes)
        return report

    def fire(self, schedule_id: uuid.UUID, now: dt.datetime) -> Job | None:
        """Fire one due schedule: insert its tick's job (unless another node did), advance it."""
        with vendor.atomic():
            schedule = store.lock_due_schedule(schedule_id, now)
            if schedule is None:
                return None  # another node holds it or has already moved it on
            try:
                tick, following, meta = self._plan(schedule, now)
            except InvalidSchedule as exc:
                logger.error("kathikon: cron schedule %s is invalid (%s); it will not fire "
                             "until it is updated", schedule, exc)
                store.advance_schedule(schedule, fired=None, next_fire_at=None)
                return None
            job = None
            if tick is not None:
                row = self._row(schedule, tick, meta, now)
                job = store.insert_tick_job(row) if row is not None else None
                if row is not None and job is None:
                    self.already_fired += 1
                    logger.debug("kathikon: cron tick %s of %s was fired by another node",
                                 tick.isoformat(), schedule)
            store.advance_schedule(schedule, fired=tick, next_fire_at=following)
        if job is not None:
            self._signal(schedule, job, tick)
        return job

    # -- internals ---------------------------------------------------------------------------

    def _sweep_batches(self) -> None:
        from kathikon.batch import complete_finished_batches

        try:
            complete_finished_batches()
        except Exception:  # never let the safety net slow down the cron ticks (backoff)
            logger.exception("kathikon: completing finished batches failed; retrying next run")

    def _plan(self, schedule: CronSchedule, now: dt.datetime
              ) -> tuple[dt.datetime | None, dt.datetime, dict[str, Any]]:
        """The tick to fire (``None``: skip), the next fire time, and the job's meta."""
        due = schedule.next_fire_at
        assert due is not None
        latest, count = crontab.latest_tick(schedule.expression, schedule.timezone, due, now)
        assert latest is not None
        following = crontab.next_tick(schedule.expression, schedule.timezone, latest)
        on_time = now - latest <= self.misfire_grace
        if count == 1 and on_time:
            return latest, following, {}
        if not (schedule.catch_up or on_time):
            logger.info("kathikon: cron schedule %s: ticks since %s were missed and are "
                        "skipped (catch_up is off)", schedule, due.isoformat())
            return None, following, {}
        logger.info("kathikon: cron schedule %s: ticks since %s were missed; firing the latest "
                    "(%s) once", schedule, due.isoformat(), latest.isoformat())
        return latest, following, {"cron_missed_since": due.isoformat()}

    def _row(self, schedule: CronSchedule, tick: dt.datetime, meta: dict[str, Any],
             now: dt.datetime) -> JobRow | None:
        options = {"queue": schedule.queue or None, "priority": schedule.priority,
                   "max_attempts": schedule.max_attempts, "cron_id": schedule.id,
                   "scheduled_at": tick, "meta": meta}
        try:
            return build_row(schedule.worker, schedule.args, options, now)
        except InvalidJob as exc:
            logger.error("kathikon: cron schedule %s skipped the tick %s: %s", schedule,
                         tick.isoformat(), exc)
            return None

    def _signal(self, schedule: CronSchedule, job: Job, tick: dt.datetime | None) -> None:
        signals.send(signals.cron_enqueued, CronSchedule, schedule=schedule, job=job, tick=tick)
        try:
            _, cls = worker_class(job.worker)
        except KathikonError:
            return
        signals.send(signals.job_inserted, cls, job=job)
