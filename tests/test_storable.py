"""Outcomes made storable at the source: text cleaning and caps, results, delays, error kinds."""

from __future__ import annotations

import math

import pytest

import kathikon
from kathikon.exceptions import error_kind, read_kind
from kathikon.storable import (
    MAX_DELAY,
    MAX_RESULT_BYTES,
    clamp_delay,
    clean_text,
    describe,
    storable_result,
)


def test_clean_text_replaces_nul_and_lone_surrogates_and_keeps_valid_text():
    assert clean_text("a\x00b\ud800c\udfffd", 100) == "a\ufffdb\ufffdc\ufffdd"
    assert clean_text("emoji 😀 and é", 100) == "emoji 😀 and é"


def test_clean_text_caps_keeping_head_and_tail():
    text = "H" * 5000 + "m" * 100_000 + "T" * 5000
    cut = clean_text(text, 8000)
    assert len(cut) <= 8000
    assert cut.startswith("H" * 3900) and cut.endswith("T" * 3900)
    assert f"[… {len(text) - (8000 - 48)} characters cut …]" in cut
    assert clean_text("short", 8000) == "short"


def test_describe_survives_a_broken_str():
    class Hostile(Exception):
        def __str__(self):
            raise RuntimeError("no")

    assert describe(Hostile()) == "<unprintable Hostile>"
    assert describe(ValueError("fine")) == "fine"


@pytest.mark.parametrize("result", [
    {"x": float("nan")}, [float("inf")], object(), {"s": "a\x00b"}, ["\ud800"],
    {"\udc00": 1}, "x" * (MAX_RESULT_BYTES + 1),
])
def test_results_no_database_takes_the_same_way_are_refused(result):
    with pytest.raises(kathikon.UnstorableOutcome) as info:
        storable_result(result)
    assert str(info.value).startswith("the result cannot be stored")


def test_storable_results_are_returned_as_stored():
    assert storable_result({"a": (1, 2), 3: "😀"}) == {"a": [1, 2], "3": "😀"}
    assert storable_result("a \\u0000 literal backslash") == "a \\u0000 literal backslash"
    assert storable_result(None) is None


def test_clamp_delay():
    assert clamp_delay(30) == 30
    assert clamp_delay(-5) == 0.0
    assert clamp_delay(1e12) == clamp_delay(math.inf) == MAX_DELAY == 365 * 86400
    assert clamp_delay(math.nan) is None and clamp_delay("10") is None and clamp_delay(True) is None


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -1, "10", True])
def test_retry_and_snooze_refuse_bad_delays_when_built(bad):
    with pytest.raises(ValueError, match="Snooze needs"):
        kathikon.Snooze(bad)
    with pytest.raises(ValueError, match="Retry needs"):
        kathikon.Retry("x", in_seconds=bad)


def test_retry_and_snooze_clamp_long_delays():
    assert kathikon.Retry("x", in_seconds=1e12).in_seconds == MAX_DELAY
    assert kathikon.Snooze(1e12).seconds == MAX_DELAY
    assert kathikon.Snooze(10).seconds == 10 and str(kathikon.Snooze(10)) == "snoozed for 10s"
    assert kathikon.Retry("x").in_seconds is None


def test_job_timeout_has_a_stable_kind_and_old_rows_still_read():
    assert error_kind(kathikon.JobTimeout) == "kathikon.JobTimeout"
    assert error_kind(kathikon.UnstorableOutcome) == "kathikon.UnstorableOutcome"
    assert error_kind(ValueError) == "builtins.ValueError"
    assert error_kind(SystemExit) == "builtins.SystemExit"
    assert error_kind(kathikon.Retry) == "kathikon.workers.Retry"
    assert read_kind("kathikon.executor.JobTimeout") == "kathikon.JobTimeout"
    assert read_kind("builtins.ValueError") == "builtins.ValueError"
    assert issubclass(kathikon.JobTimeout, kathikon.KathikonError)


def test_every_failure_kathikon_records_imports_back_from_its_kind():
    """Django Tasks' ``exception_class`` imports the recorded kind: it must resolve."""
    from django.utils.module_loading import import_string

    from kathikon.exceptions import RECORDED, error_kind

    for cls in RECORDED:
        kind = error_kind(cls)
        assert kind == f"kathikon.{cls.__name__}"
        assert import_string(kind) is cls
