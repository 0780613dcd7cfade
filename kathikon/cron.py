"""Recurring schedules: each tick of a cron expression enqueues exactly one job.

    from kathikon import cron

    schedule = cron.insert("app.workers.Digest", {"kind": "daily"}, cron="0 9 * * *",
                           timezone="Europe/Berlin", queue="emails")
    cron.update(schedule.id.hex, cron="0 10 * * *")   # next fire time recomputed
    cron.pause(schedule.id.hex); cron.resume(schedule.id.hex)
    cron.fetch(schedule.id.hex); cron.list(); cron.cancel(schedule.id.hex)
    cron.is_valid("*/5 * * * *")                       # True

Expressions have five fields (minute hour day-of-month month day-of-week,
croniter's syntax) or are one of ``@hourly @daily @midnight @weekly @monthly
@yearly @annually``. Ticks are computed in the schedule's IANA ``timezone``
(default: ``KATHIKON["TIMEZONE"]``, else ``settings.TIME_ZONE``); see
docs/cron.md for what daylight saving time does to them. A running
``kathikon_worker`` fires due ticks (``kathikon.runtime.scheduler.CronScheduler``);
each job carries its tick in ``scheduled_at`` and its schedule in ``cron``.

Options of ``insert`` / ``update`` (defaults): ``queue``, ``priority``,
``max_attempts`` (the worker's), ``timezone`` (see above), ``name`` (None;
unique), ``paused`` (False), ``catch_up`` (True: ticks missed while no worker
ran fire once on the next start; False: they are skipped).

Errors: ``InvalidSchedule`` (expression, timezone, name, options),
``InvalidJob`` (worker, args, queue, priority, max_attempts), ``CronNotFound``.
Signal: ``cron_enqueued(sender=CronSchedule, schedule, job, tick)`` when a tick fires.

Schedules can also be declared in ``KATHIKON["CRON"]``; those are synced when a
worker starts (see :func:`sync_static`).
"""

from __future__ import annotations

import builtins
import datetime as dt
import logging
from typing import Any

from django.db import IntegrityError

from kathikon import conf, crontab
from kathikon.exceptions import InvalidJob, InvalidSchedule, shown
from kathikon.jobspec import build_row, worker_class
from kathikon.models import CronSchedule
from kathikon.routing import require_home
from kathikon.storage import cron as store
from kathikon.storage import vendor

logger = logging.getLogger("kathikon")

_pylist = builtins.list  # ``list`` below is the public function

#: Keys a schedule takes (``insert``/``update`` keywords and ``KATHIKON["CRON"]`` entries).
SCHEDULE_KEYS = frozenset({"cron", "worker", "args", "queue", "timezone", "priority",
                           "max_attempts", "name", "paused", "catch_up"})
STATIC_KEYS = SCHEDULE_KEYS - {"paused"}


def insert(worker: Any, args: dict[str, Any] | None = None, *, cron: str,
           **options: Any) -> CronSchedule:
    """Create a schedule; its first tick is the first match after now."""
    fields = _fields({"worker": worker, "args": args, "cron": cron, **options})
    fields["next_fire_at"] = crontab.next_tick(fields["expression"], fields["timezone"],
                                               vendor.now())
    try:
        with vendor.atomic():  # a savepoint: a name clash leaves the caller's transaction usable
            return store.insert_schedule(**fields)
    except IntegrityError:
        raise InvalidSchedule(f"a cron schedule named {fields['name']!r} exists already") \
            from None


def update(schedule_id: object, **changes: Any) -> CronSchedule:
    """Change a schedule; a new expression or timezone recomputes the next fire time."""
    with vendor.atomic():
        schedule = store.fetch_schedule(schedule_id, lock=True)
        current = {"worker": schedule.worker, "args": schedule.args,
                   "cron": schedule.expression, "timezone": schedule.timezone,
                   "queue": schedule.queue or None, "priority": schedule.priority,
                   "max_attempts": schedule.max_attempts, "name": schedule.name,
                   "paused": schedule.paused, "catch_up": schedule.catch_up}
        unknown = set(changes) - SCHEDULE_KEYS
        if unknown:
            raise InvalidSchedule(f"unknown cron schedule option {sorted(unknown)[0]!r}")
        fields = _fields({**current, **changes})
        if (fields["expression"] != schedule.expression
                or fields["timezone"] != schedule.timezone
                or (schedule.paused and not fields["paused"])
                or schedule.next_fire_at is None):
            fields["next_fire_at"] = crontab.next_tick(
                fields["expression"], fields["timezone"], vendor.now())
        changed = {key: value for key, value in fields.items()
                   if getattr(schedule, key) != value}
        if not changed:
            return schedule
        try:
            with vendor.atomic():
                return store.save_schedule(schedule, **changed)
        except IntegrityError:
            raise InvalidSchedule(f"a cron schedule named {fields['name']!r} exists already") \
                from None


def fetch(schedule_id: object) -> CronSchedule:
    """The schedule with that id (hex) or name; ``CronNotFound`` otherwise."""
    return store.fetch_schedule(schedule_id)


def list() -> builtins.list[CronSchedule]:  # the seed's name; shadows the builtin here
    """Every schedule, the next to fire first."""
    return store.list_schedules()


def cancel(schedule_id: object) -> CronSchedule:
    """Delete the schedule (jobs it already enqueued are left alone); returns it."""
    schedule = store.fetch_schedule(schedule_id)
    store.delete_schedule(schedule)
    return schedule


def pause(schedule_id: object) -> CronSchedule:
    """Stop firing; ``resume`` starts again from the next tick after that moment."""
    return update(schedule_id, paused=True)


def resume(schedule_id: object) -> CronSchedule:
    """Fire again; ticks that passed while paused are not fired."""
    return update(schedule_id, paused=False)


def is_valid(expression: object) -> bool:
    """True when ``expression`` is a five-field cron expression or a nickname."""
    return crontab.is_valid(expression)


def next_fire_times(expression: str, *, count: int = 5, timezone: str | None = None,
                    after: dt.datetime | None = None) -> builtins.list[dt.datetime]:
    """The next ``count`` ticks of an expression (aware, UTC) — previews and admin pages."""
    expression = crontab.validate(expression)
    tz = timezone or conf.timezone()
    crontab.zone(tz)
    return crontab.next_ticks(expression, tz, after or vendor.now(), count)


# -- static schedules (KATHIKON["CRON"]) ---------------------------------------------------


def static_problems(entries: object) -> builtins.list[tuple[int, str]]:
    """``(index, message)`` for every entry of ``KATHIKON["CRON"]`` that cannot be used."""
    if not isinstance(entries, (_pylist, tuple)):
        return [(-1, "KATHIKON['CRON'] must be a list of dicts")]
    problems: builtins.list[tuple[int, str]] = []
    names: set[str] = set()
    for index, entry in enumerate(entries):
        try:
            fields = _static_fields(entry)
        except (InvalidSchedule, InvalidJob) as exc:
            problems.append((index, str(exc)))
            continue
        if fields["name"] in names:
            problems.append((index, f"the name {fields['name']!r} is used twice"))
        names.add(fields["name"])
    return problems


def sync_static(entries: object = None, *, now: dt.datetime | None = None) -> dict[str, Any]:
    """Make the static schedules match ``KATHIKON["CRON"]``; API-created schedules are kept.

    Creates new names, updates changed ones (a new expression or timezone
    recomputes the next fire time; otherwise the schedule keeps its place, so
    ticks missed during a restart still fire), deletes static schedules whose
    name is gone. Bad entries are logged and skipped (system check
    ``kathikon.E013`` reports them). Returns the names per outcome.
    """
    entries = conf.cron() if entries is None else entries
    now = now or vendor.now()
    bad = dict(static_problems(entries))
    report: dict[str, _pylist[Any]] = {"created": [], "updated": [], "unchanged": [],
                                       "removed": [], "skipped": []}
    wanted: dict[str, dict[str, Any]] = {}
    for index, entry in enumerate(entries if isinstance(entries, (_pylist, tuple)) else ()):
        if index in bad:
            logger.error("kathikon: KATHIKON['CRON'][%d] skipped: %s", index, bad[index])
            report["skipped"].append(index)
            continue
        fields = _static_fields(entry)
        wanted.setdefault(fields["name"], fields)
    existing = store.static_schedules()
    for name, fields in wanted.items():
        outcome = _sync_one(name, fields, existing.get(name), now)
        report[outcome].append(name)
    for name, schedule in existing.items():
        if name not in wanted:
            store.delete_schedule(schedule)
            report["removed"].append(name)
    return report


def _sync_one(name: str, fields: dict[str, Any], schedule: CronSchedule | None,
              now: dt.datetime) -> str:
    if schedule is None:
        try:
            with vendor.atomic():
                store.insert_schedule(static=True, next_fire_at=crontab.next_tick(
                    fields["expression"], fields["timezone"], now), **fields)
        except IntegrityError:
            # Another node created it at the same moment, or the API owns this name.
            other = store.schedules().filter(name=name).first()
            if other is not None and not other.static:
                logger.warning("kathikon: KATHIKON['CRON'] entry %r skipped: a schedule created "
                               "through the API has that name", name)
                return "skipped"
        return "created"
    changed = {key: value for key, value in fields.items() if getattr(schedule, key) != value}
    if not changed:
        return "unchanged"
    if "expression" in changed or "timezone" in changed:
        changed["next_fire_at"] = crontab.next_tick(fields["expression"], fields["timezone"],
                                                    now)
    store.save_schedule(schedule, **changed)
    return "updated"


def _static_fields(entry: object) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise InvalidSchedule(f"each entry must be a dict, not {type(entry).__name__}")
    unknown = set(entry) - STATIC_KEYS
    if unknown:
        raise InvalidSchedule(f"unknown key {sorted(unknown)[0]!r} (known: "
                              f"{', '.join(sorted(STATIC_KEYS))})")
    for key in ("name", "cron", "worker"):
        if key not in entry:
            raise InvalidSchedule(f"the key {key!r} is required")
    fields = _fields(dict(entry))
    del fields["paused"]  # pausing a static schedule is an operator's action, kept across syncs
    return fields


def _fields(values: dict[str, Any]) -> dict[str, Any]:
    """Validated model fields from user-facing keys (``cron`` becomes ``expression``)."""
    unknown = set(values) - SCHEDULE_KEYS
    if unknown:
        raise InvalidSchedule(f"unknown cron schedule option {sorted(unknown)[0]!r}")
    expression = crontab.validate(values.get("cron"))
    timezone = values.get("timezone") or conf.timezone()
    crontab.zone(timezone)
    name = values.get("name")
    if name is not None and (not isinstance(name, str) or not 0 < len(name) <= 200
                             or not name.isprintable()):
        raise InvalidSchedule("name must be 1-200 printable characters (no NUL, control "
                              f"characters or lone surrogates), not {shown(name)}")
    for key in ("paused", "catch_up"):
        if key in values and not isinstance(values[key], bool):
            raise InvalidSchedule(f"{key} must be True or False, not {shown(values[key])}")
    path, _ = worker_class(values.get("worker"))
    queue, priority, max_attempts = (values.get(k) for k in ("queue", "priority",
                                                              "max_attempts"))
    # The job options are checked the way an insert checks them (max_attempts=1
    # stands in when unset so the check never needs the global default).
    row = build_row(path, values.get("args"), {"queue": queue, "priority": priority,
                                                "max_attempts": 1 if max_attempts is None
                                                else max_attempts})
    require_home([row.queue], "a cron schedule")
    return {
        "worker": path, "args": row.args, "expression": expression, "timezone": timezone,
        "queue": queue or "", "priority": priority, "max_attempts": max_attempts, "name": name,
        "paused": values.get("paused", False),
        "catch_up": values.get("catch_up", True),
    }
