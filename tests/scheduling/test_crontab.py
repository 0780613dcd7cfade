"""Pure cron tick logic: nicknames, validation, and DST in Berlin and New York (no database)."""

from __future__ import annotations

import datetime as dt
import itertools
from zoneinfo import ZoneInfo

import pytest

from kathikon import InvalidSchedule, crontab

UTC = dt.timezone.utc
BERLIN, NEW_YORK = "Europe/Berlin", "America/New_York"


def at(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def local(ticks: list[dt.datetime], tz: str) -> list[str]:
    return [t.astimezone(ZoneInfo(tz)).strftime("%m-%d %H:%M %Z") for t in ticks]


@pytest.mark.parametrize(("nickname", "expression"), [
    ("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"),
    ("@weekly", "0 0 * * 0"), ("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"), ("@DAILY", "0 0 * * *"),
])
def test_nicknames_expand(nickname, expression):
    assert crontab.validate(nickname) == expression
    assert crontab.is_valid(nickname)


def test_nickname_ticks():
    start = at(2026, 5, 13, 10, 30)  # a Wednesday
    assert crontab.next_tick("@hourly", "UTC", start) == at(2026, 5, 13, 11)
    assert crontab.next_tick("@daily", "UTC", start) == at(2026, 5, 14)
    assert crontab.next_tick("@weekly", "UTC", start) == at(2026, 5, 17)  # Sunday
    assert crontab.next_tick("@monthly", "UTC", start) == at(2026, 6, 1)
    assert crontab.next_tick("@yearly", "UTC", start) == at(2027, 1, 1)


@pytest.mark.parametrize("expression", [
    "", "   ", None, 5, "* * * *", "* * * * * *", "0 0 1 1 * 2030", "61 * * * *",
    "* 24 * * *", "* * 32 * *", "* * * 13 *", "* * * * 8", "@every_minute", "@reboot",
    "H * * * *", "R 3 * * *", "0 0 30 2 *", "a b c d e", "*/0 * * * *",
])
def test_invalid_expressions(expression):
    assert not crontab.is_valid(expression)
    with pytest.raises(InvalidSchedule):
        crontab.validate(expression)


@pytest.mark.parametrize("expression", [
    "* * * * *", "*/5 * * * *", "0 9 * * MON-FRI", "30 2 * * *", "0 0 L * *", "0 0 * * 1#2",
    "0 12 1,15 JAN,JUL *", "  0   9 * *  *  ",
])
def test_valid_expressions(expression):
    assert crontab.is_valid(expression)


@pytest.mark.parametrize("tz", ["Mars/Olympus_Mons", "", None, 5, "CEST+2"])
def test_invalid_timezones(tz):
    with pytest.raises(InvalidSchedule):
        crontab.zone(tz)


def test_next_tick_is_strictly_after_and_in_utc():
    tick = crontab.next_tick("0 9 * * *", BERLIN, at(2026, 5, 13, 7))  # 09:00 CEST exactly
    assert tick == at(2026, 5, 14, 7)
    assert tick.tzinfo == UTC
    with pytest.raises(ValueError):
        crontab.next_tick("0 9 * * *", BERLIN, dt.datetime(2026, 5, 13))


# -- DST: Europe/Berlin (2026: spring forward 29 March 02:00 → 03:00, fall back 25 October
#    03:00 → 02:00) and America/New_York (8 March 02:00 → 03:00, 1 November 02:00 → 01:00).


def test_berlin_spring_forward_hourly_skips_the_missing_hour_without_losing_a_real_hour():
    ticks = crontab.next_ticks("0 * * * *", BERLIN, at(2026, 3, 28, 23, 30), 4)
    assert local(ticks, BERLIN) == ["03-29 01:00 CET", "03-29 03:00 CEST", "03-29 04:00 CEST",
                                    "03-29 05:00 CEST"]
    assert ticks == [at(2026, 3, 29, h) for h in (0, 1, 2, 3)]  # every real hour, once


def test_berlin_spring_forward_daily_0230_runs_once_shifted_to_0330():
    ticks = crontab.next_ticks("30 2 * * *", BERLIN, at(2026, 3, 27, 12), 4)
    assert local(ticks, BERLIN) == ["03-28 02:30 CET", "03-29 03:30 CEST", "03-30 02:30 CEST",
                                    "03-31 02:30 CEST"]


def test_berlin_fall_back_hourly_fires_in_both_occurrences_of_the_repeated_hour():
    ticks = crontab.next_ticks("0 * * * *", BERLIN, at(2026, 10, 24, 22, 30), 5)
    assert local(ticks, BERLIN) == ["10-25 01:00 CEST", "10-25 02:00 CEST", "10-25 02:00 CET",
                                    "10-25 03:00 CET", "10-25 04:00 CET"]
    assert ticks == [at(2026, 10, 24, 23), *(at(2026, 10, 25, h) for h in range(4))]


def test_berlin_fall_back_daily_0230_runs_once_at_the_first_occurrence():
    ticks = crontab.next_ticks("30 2 * * *", BERLIN, at(2026, 10, 23, 12), 4)
    assert local(ticks, BERLIN) == ["10-24 02:30 CEST", "10-25 02:30 CEST", "10-26 02:30 CET",
                                    "10-27 02:30 CET"]


def test_new_york_spring_forward_hourly_and_half_hourly():
    hourly = crontab.next_ticks("0 * * * *", NEW_YORK, at(2026, 3, 8, 5, 30), 3)
    assert local(hourly, NEW_YORK) == ["03-08 01:00 EST", "03-08 03:00 EDT", "03-08 04:00 EDT"]
    assert hourly == [at(2026, 3, 8, 6), at(2026, 3, 8, 7), at(2026, 3, 8, 8)]
    half = crontab.next_ticks("30 * * * *", NEW_YORK, at(2026, 3, 8, 5), 3)
    assert local(half, NEW_YORK) == ["03-08 00:30 EST", "03-08 01:30 EST", "03-08 03:30 EDT"]


def test_new_york_spring_forward_daily_0230_runs_once_at_0330():
    ticks = crontab.next_ticks("30 2 * * *", NEW_YORK, at(2026, 3, 7, 12), 3)
    assert local(ticks, NEW_YORK) == ["03-08 03:30 EDT", "03-09 02:30 EDT", "03-10 02:30 EDT"]


def test_new_york_fall_back_hourly_fires_in_both_01_hours():
    ticks = crontab.next_ticks("30 * * * *", NEW_YORK, at(2026, 11, 1, 4), 4)
    assert local(ticks, NEW_YORK) == ["11-01 00:30 EDT", "11-01 01:30 EDT", "11-01 01:30 EST",
                                      "11-01 02:30 EST"]


def test_new_york_fall_back_daily_0130_runs_once_and_0230_unaffected():
    ticks = crontab.next_ticks("30 1 * * *", NEW_YORK, at(2026, 10, 31, 12), 3)
    assert local(ticks, NEW_YORK) == ["11-01 01:30 EDT", "11-02 01:30 EST", "11-03 01:30 EST"]
    ticks = crontab.next_ticks("30 2 * * *", NEW_YORK, at(2026, 10, 31, 12), 2)
    assert local(ticks, NEW_YORK) == ["11-01 02:30 EST", "11-02 02:30 EST"]


def test_fixed_time_after_the_first_occurrence_is_not_fired_again_in_the_second():
    # 05:45Z = 01:45 EDT... 06:15Z = 01:15 EST (second occurrence): 01:30 fired at 05:30Z already.
    assert crontab.next_tick("30 1 * * *", NEW_YORK, at(2026, 11, 1, 6, 15)) == \
        at(2026, 11, 2, 6, 30)


def test_ticks_inside_the_skipped_hour_that_coincide_after_the_shift_fire_once():
    ticks = crontab.next_ticks("15,45 2-3 * * *", BERLIN, at(2026, 3, 28, 23), 4)
    assert local(ticks, BERLIN) == ["03-29 03:15 CEST", "03-29 03:45 CEST", "03-30 02:15 CEST",
                                    "03-30 02:45 CEST"]


@pytest.mark.parametrize(("tz", "start"), [
    (BERLIN, at(2026, 3, 25)), (BERLIN, at(2026, 10, 21)),
    (NEW_YORK, at(2026, 3, 5)), (NEW_YORK, at(2026, 10, 29)),
])
@pytest.mark.parametrize("expression", ["30 2 * * *", "30 1 * * *", "0 3 * * *", "@daily"])
def test_a_daily_schedule_fires_exactly_once_per_local_day_across_dst(tz, start, expression):
    ticks = crontab.next_ticks(expression, tz, start, 7)
    days = [t.astimezone(ZoneInfo(tz)).date() for t in ticks]
    assert len(set(days)) == 7
    assert days == sorted(days)
    assert all((b - a) == dt.timedelta(days=1) for a, b in itertools.pairwise(days))


@pytest.mark.parametrize(("tz", "start"), [
    (BERLIN, at(2026, 3, 28, 20)), (BERLIN, at(2026, 10, 24, 20)),
    (NEW_YORK, at(2026, 3, 8, 0)), (NEW_YORK, at(2026, 10, 31, 23)),
])
def test_an_hourly_schedule_fires_every_real_hour_across_dst(tz, start):
    ticks = crontab.next_ticks("@hourly", tz, start, 12)
    assert all(b - a == dt.timedelta(hours=1) for a, b in itertools.pairwise(ticks))
    assert len(set(ticks)) == 12


def test_latest_tick_counts_missed_ticks_and_jumps_long_gaps():
    latest, count = crontab.latest_tick("* * * * *", "UTC", at(2026, 1, 1, 10, 1),
                                        at(2026, 1, 1, 10, 30, 30))
    assert (latest, count) == (at(2026, 1, 1, 10, 30), 30)
    latest, count = crontab.latest_tick("* * * * *", "UTC", at(2026, 1, 1), at(2026, 1, 20, 8))
    assert latest == at(2026, 1, 20, 8) and count >= 2
    assert crontab.latest_tick("@hourly", "UTC", at(2026, 1, 1, 11), at(2026, 1, 1, 10)) == \
        (None, 0)


TRANSITIONS = [(BERLIN, at(2026, 3, 29, 1)), (BERLIN, at(2026, 10, 25, 1)),
               (NEW_YORK, at(2026, 3, 8, 7)), (NEW_YORK, at(2026, 11, 1, 6))]


def reference_ticks(expression: str, tz: str, start: dt.datetime, end: dt.datetime) -> list:
    """The documented rules, brute force, minute by minute (no search, no margins)."""
    from croniter import croniter

    zinfo = ZoneInfo(tz)
    minutes = int((end - start).total_seconds() // 60)
    if expression.split()[1] == "*":  # elapsed time: every real minute whose local time matches
        return [t for t in (start + dt.timedelta(minutes=m) for m in range(minutes))
                if croniter.match(expression, t.astimezone(zinfo).replace(tzinfo=None))]
    # wall clock: every matching local minute once, read with the pre-change offset (fold=0)
    # so a skipped time is shifted forward and a repeated one fires at its first occurrence
    first = start.astimezone(zinfo).replace(tzinfo=None) - dt.timedelta(hours=3)
    walls = (first + dt.timedelta(minutes=m) for m in range(minutes + 360))
    instants = {w.replace(tzinfo=zinfo, fold=0).astimezone(UTC) for w in walls
                if croniter.match(expression, w)}
    return sorted(t for t in instants if start <= t < end)


@pytest.mark.parametrize(("tz", "transition"), TRANSITIONS)
@pytest.mark.parametrize("expression", [
    "*/7 * * * *", "15 * * * *", "30 2 * * *", "0 1-4 * * *", "45 1,2,3 * * *",
    "*/20 2 * * *", "0 0 * * *", "10 * * * SUN",
])
def test_next_tick_agrees_with_a_brute_force_reference_around_dst(expression, tz, transition):
    start, end = transition - dt.timedelta(hours=6), transition + dt.timedelta(hours=6)
    expected = reference_ticks(expression, tz, start, end)
    got, tick = [], crontab.next_tick(expression, tz, start - dt.timedelta(seconds=1))
    while tick < end:
        got.append(tick)
        tick = crontab.next_tick(expression, tz, tick)
    assert got == expected
