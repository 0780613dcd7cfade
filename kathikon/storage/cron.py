"""Internal: cron schedule rows and the exactly-once insert of a tick's job.

Exactly once across nodes is the database's job, not timing's: a tick's job is
inserted with ``cron_id`` and ``scheduled_at = tick``, and the unique key
``kathikon_job_cron_tick`` on those two columns refuses a second one. A node
that loses that race gets an ``IntegrityError`` inside a savepoint and treats
it as "another node already fired this tick". Due schedules are additionally
locked with ``FOR UPDATE SKIP LOCKED`` where the database has it, so nodes
split the work instead of racing for it — an optimisation, not the guarantee.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from django.db import IntegrityError, transaction

from kathikon.exceptions import CronNotFound
from kathikon.ids import parse_id
from kathikon.jobspec import JobRow
from kathikon.models import CronSchedule, Job
from kathikon.storage import vendor
from kathikon.storage.inserts import insert_job


def schedules() -> Any:
    return CronSchedule.objects.using(vendor.alias())


def insert_schedule(**fields: Any) -> CronSchedule:
    now = vendor.now()
    schedule = CronSchedule(inserted_at=now, updated_at=now, **fields)
    schedule.save(force_insert=True, using=vendor.alias())
    return schedule


def fetch_schedule(ref: object, *, lock: bool = False) -> CronSchedule:
    """The schedule with that id (hex string or UUID) or name; ``CronNotFound`` otherwise."""
    query = schedules().select_for_update() if lock else schedules()
    pk = parse_id(getattr(ref, "pk", ref))
    schedule = query.filter(pk=pk).first() if pk is not None else None
    if schedule is None and isinstance(ref, str):
        schedule = query.filter(name=ref).first()
    if schedule is None:
        raise CronNotFound(f"no cron schedule with id or name {ref!r}")
    return schedule


def save_schedule(schedule: CronSchedule, **changes: Any) -> CronSchedule:
    for name, value in changes.items():
        setattr(schedule, name, value)
    schedule.updated_at = vendor.now()
    schedule.save(using=vendor.alias(), update_fields=[*changes, "updated_at"])
    return schedule


def delete_schedule(schedule: CronSchedule) -> None:
    schedules().filter(pk=schedule.pk).delete()


def list_schedules() -> list[CronSchedule]:
    return list(schedules().order_by("next_fire_at", "name", "id"))


def static_schedules() -> dict[str, CronSchedule]:
    return {s.name: s for s in schedules().filter(static=True) if s.name}


def due_schedule_ids(now: dt.datetime, *, limit: int = 100) -> list[uuid.UUID]:
    """Ids of unpaused schedules whose next fire time has come, most overdue first."""
    return list(schedules().filter(paused=False, next_fire_at__lte=now)
                .order_by("next_fire_at").values_list("id", flat=True)[:limit])


def lock_due_schedule(schedule_id: uuid.UUID, now: dt.datetime) -> CronSchedule | None:
    """Inside the caller's transaction: the schedule if it is still due and nobody holds it."""
    query = schedules().filter(pk=schedule_id, paused=False, next_fire_at__lte=now)
    if vendor.connection().features.has_select_for_update_skip_locked:
        query = query.select_for_update(skip_locked=True)
    return query.first()


def insert_tick_job(row: JobRow) -> Job | None:
    """Insert the job of one tick; ``None`` when that tick's job already exists."""
    try:
        with transaction.atomic(using=vendor.alias()):  # a savepoint: the loser's error stays here
            return insert_job(row)
    except IntegrityError:
        if not Job.objects.using(vendor.alias()).filter(
                cron_id=row.cron_id, scheduled_at=row.scheduled_at).exists():
            raise  # some other constraint failed: not a lost race
        return None


def advance_schedule(schedule: CronSchedule, *, fired: dt.datetime | None,
                     next_fire_at: dt.datetime | None) -> bool:
    """Move the schedule past a tick, only if nobody moved it since it was read.

    ``next_fire_at=None`` parks a schedule that cannot be evaluated any more.
    """
    changes: dict[str, Any] = {"next_fire_at": next_fire_at}
    if fired is not None:
        changes["last_fire_at"] = fired
    updated = schedules().filter(pk=schedule.pk, next_fire_at=schedule.next_fire_at).update(
        **changes)
    if updated:
        for name, value in changes.items():
            setattr(schedule, name, value)
    return bool(updated)
