"""Internal: cron expressions and their ticks — pure, no ORM, no database.

``validate(expression)`` normalises an expression (nicknames expanded) or
raises ``InvalidSchedule``; ``next_tick(expression, tz, after)`` is the first
tick strictly after ``after``, computed in the IANA timezone ``tz`` and
returned in UTC. ``kathikon.cron`` stores schedules, ``kathikon.runtime.scheduler``
fires them; both call only these functions for time arithmetic.

Daylight saving time (documented for users in docs/cron.md):

- A schedule whose hour field is ``*`` follows elapsed time: it is evaluated
  at every real minute against the local wall clock. A wall-clock hour that is
  skipped (spring forward) has no ticks — ``0 * * * *`` fires at 01:00 CET and
  then at 03:00 CEST, one real hour later — and a repeated hour (fall back)
  fires on both of its occurrences, so hourly stays hourly.
- Any other schedule follows the wall clock and fires once per matching
  local time: a time inside the skipped hour fires shifted by the clock change
  (02:30 → 03:30 CEST, as if the clocks had not moved yet), and a time inside
  the repeated hour fires on its first occurrence only (02:30 CEST, not again
  at 02:30 CET). Ticks that coincide after the shift fire once.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections.abc import Iterator

from croniter import croniter

from kathikon.exceptions import InvalidSchedule, shown

UTC = dt.timezone.utc

NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# croniter extensions that make ticks differ between nodes or need a seed:
# "H" (hashed) and "R" (random) are refused; L, W and # are standard enough to keep.
_NON_DETERMINISTIC = re.compile(r"(?<![A-Za-z])[HR](?![A-Za-z])")

#: The longest expression and timezone name stored (``CronSchedule.expression`` and
#: ``.timezone``): longer ones are refused here rather than by the database (PostgreSQL's
#: DataError) or not at all (SQLite).
MAX_EXPRESSION = 200
MAX_TIMEZONE = 64

# How far a tick can move in real time relative to its wall-clock time around a
# transition (DST changes are 1 h almost everywhere, 2 h at most in practice).
_MARGIN = dt.timedelta(hours=3)


def validate(expression: object) -> str:
    """The expression with nicknames expanded; ``InvalidSchedule`` when it is not valid.

    Five fields: minute, hour, day of month, month, day of week (croniter's
    syntax: lists, ranges, steps, names like ``MON``/``JAN``, ``L`` and ``#``),
    or one of ``@hourly @daily @midnight @weekly @monthly @yearly @annually``.
    """
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidSchedule(f"a cron expression must be a non-empty string, not "
                              f"{shown(expression)}")
    text = " ".join(expression.split())
    if len(text) > MAX_EXPRESSION:
        raise InvalidSchedule(f"cron expression {text[:40]!r}… is {len(text)} characters long; "
                              f"at most {MAX_EXPRESSION} are stored")
    if text.startswith("@"):
        expanded = NICKNAMES.get(text.lower())
        if expanded is None:
            raise InvalidSchedule(f"unknown cron nickname {text!r}; use one of "
                                  f"{', '.join(NICKNAMES)}")
        return expanded
    fields = text.split(" ")
    if len(fields) != 5:
        raise InvalidSchedule(f"cron expression {text!r} has {len(fields)} fields; five are "
                              "needed: minute hour day-of-month month day-of-week")
    if _NON_DETERMINISTIC.search(text):
        raise InvalidSchedule(f"cron expression {text!r}: hashed (H) and random (R) fields "
                              "are not supported")
    try:
        valid = croniter.is_valid(text)
    except Exception:  # croniter raises assorted errors for some malformed input
        valid = False
    if not valid:
        raise InvalidSchedule(f"invalid cron expression {text!r}")
    try:  # is_valid accepts a few expressions that can never match (e.g. 30 February)
        croniter(text, dt.datetime(2000, 1, 1)).get_next(dt.datetime)
    except Exception:
        raise InvalidSchedule(f"cron expression {text!r} never matches") from None
    return text


def is_valid(expression: object) -> bool:
    try:
        validate(expression)
    except InvalidSchedule:
        return False
    return True


def zone(name: object) -> zoneinfo.ZoneInfo:
    """The IANA timezone ``name``; ``InvalidSchedule`` when there is no such zone."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_TIMEZONE:
        raise InvalidSchedule(f"timezone must be an IANA name like 'Europe/Berlin' (at most "
                              f"{MAX_TIMEZONE} characters), not {shown(name)}")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):  # OSError: "Europe", a folder
        raise InvalidSchedule(f"unknown timezone {name!r} (use an IANA name like "
                              "'Europe/Berlin')") from None


def next_tick(expression: str, tz: str | dt.tzinfo, after: dt.datetime) -> dt.datetime:
    """The first tick strictly after the aware datetime ``after``, in UTC."""
    if after.tzinfo is None:
        raise ValueError("after must be an aware datetime")
    expression = validate(expression)
    zinfo = zone(tz) if isinstance(tz, str) else tz
    after = after.astimezone(UTC)
    elapsed = expression.split(" ")[1] == "*"
    wall_after = _wall(after, zinfo)
    # Fast path: no clock change near ``after`` or near the candidate, so wall
    # time maps one-to-one onto real time and the first wall match is the answer.
    candidate = croniter(expression, wall_after).get_next(dt.datetime)
    instants = _instants(candidate, zinfo, elapsed)
    if (instants and instants[0] > after and _steady(after, zinfo)
            and _steady(instants[0], zinfo)):
        return instants[0]
    return _search(expression, zinfo, elapsed, after, wall_after)


def next_ticks(expression: str, tz: str | dt.tzinfo, after: dt.datetime,
               count: int) -> list[dt.datetime]:
    """The next ``count`` ticks after ``after`` (UTC), e.g. for a preview."""
    ticks: list[dt.datetime] = []
    for _ in range(count):
        after = next_tick(expression, tz, after)
        ticks.append(after)
    return ticks


def latest_tick(expression: str, tz: str | dt.tzinfo, since: dt.datetime,
                now: dt.datetime) -> tuple[dt.datetime | None, int]:
    """The last tick in ``[since, now]`` and how many ticks fell in that range (at least).

    ``since`` is a tick (a schedule's stored next fire time). Long gaps of a
    frequent schedule are skipped ahead instead of walked tick by tick, so the
    count is then a lower bound.
    """
    if since > now:
        return None, 0
    latest, count = since, 1
    for window in (dt.timedelta(hours=1), dt.timedelta(days=1)):
        if now - since > 2 * window:
            recent = next_tick(expression, tz, now - window)
            if recent <= now:  # a frequent schedule: the latest tick is in the last window
                latest, count = recent, 2
                break
    while True:
        following = next_tick(expression, tz, latest)
        if following > now:
            return latest, count
        latest, count = following, count + 1


def _search(expression: str, zinfo: dt.tzinfo, elapsed: bool, after: dt.datetime,
            wall_after: dt.datetime) -> dt.datetime:
    # Around a clock change wall time and real time are not monotonic with each
    # other (a shifted 02:30 lands after a real 03:15), so collect every
    # candidate in a window and keep the earliest one after ``after``.
    best: dt.datetime | None = None
    limit: dt.datetime | None = None
    for wall in _walls(expression, wall_after - _MARGIN):
        if limit is not None and wall > limit:
            return best  # type: ignore[return-value]
        for instant in _instants(wall, zinfo, elapsed):
            if instant > after and (best is None or instant < best):
                best = instant
                limit = _wall(best, zinfo) + _MARGIN
    raise AssertionError("unreachable: croniter iterates forever")  # pragma: no cover


def _walls(expression: str, start: dt.datetime) -> Iterator[dt.datetime]:
    iterator = croniter(expression, start)
    while True:
        yield iterator.get_next(dt.datetime)


def _instants(wall: dt.datetime, zinfo: dt.tzinfo, elapsed: bool) -> list[dt.datetime]:
    """The real instants (UTC) at which the local wall-clock time ``wall`` fires."""
    first = wall.replace(tzinfo=zinfo, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zinfo, fold=1).astimezone(UTC)
    exists = _wall(first, zinfo) == wall
    if not exists:  # skipped by a spring-forward change
        # fold=0 reads the time with the offset from before the change: shifted forward.
        return [] if elapsed else [first]
    if first != second and elapsed:  # repeated by a fall-back change: both occurrences
        return [first, second]
    return [first]


def _wall(instant: dt.datetime, zinfo: dt.tzinfo) -> dt.datetime:
    return instant.astimezone(zinfo).replace(tzinfo=None)


def _steady(instant: dt.datetime, zinfo: dt.tzinfo) -> bool:
    """No UTC-offset change within the margin around ``instant``."""
    offset = instant.astimezone(zinfo).utcoffset()
    return ((instant - _MARGIN).astimezone(zinfo).utcoffset() == offset
            == (instant + _MARGIN).astimezone(zinfo).utcoffset())
