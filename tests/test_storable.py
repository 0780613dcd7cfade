"""Outcomes made storable at the source: text cleaning and caps, results, delays, error kinds."""

from __future__ import annotations

import math

import pytest

import kathikon
from kathikon.exceptions import error_kind, read_kind
from kathikon.jobspec import MAX_JSON_DEPTH
from kathikon.storable import (
    MAX_DELAY,
    MAX_MARKER_MESSAGE,
    MAX_RESULT_BYTES,
    MAX_RESULT_DEPTH,
    REASONS,
    UNSTORED,
    clamp_delay,
    clean_text,
    describe,
    result_or_marker,
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


def nested(depth: int) -> list:
    """A list ``depth`` levels deep (the outer list counts)."""
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


class ReadFails(dict):
    """A dict that raises when the encoder reads it, with ``self["why"]`` as the message."""

    def items(self):
        raise RuntimeError(self.get("why", "this mapping cannot be read"))


class EvilName:
    """Its module path holds what no database stores (NUL, a lone surrogate)."""


EvilName.__module__ = "evil\x00\ud800"

# result: (reason, type recorded in the marker, words in the message)
UNSTORABLE = {
    "nan": ({"x": float("nan")}, "not_json", "builtins.dict", "not JSON"),
    "inf": ([float("inf")], "not_json", "builtins.list", "not JSON"),
    "object": (object(), "not_json", "builtins.object", "not JSON"),
    "set": ({1, 2}, "not_json", "builtins.set", "Object of type set is not JSON serializable"),
    "int_5000_digits": (10**4999, "not_json", "builtins.int", "4300 digits"),
    "unreadable": (ReadFails(a=1), "not_json", "tests.test_storable.ReadFails",
                   "this mapping cannot be read"),
    "nul": ({"s": "a\x00b"}, "bad_text", "builtins.dict", "NUL"),
    "surrogate": (["\ud800"], "bad_text", "builtins.list", "lone surrogate"),
    "surrogate_key": ({"\udc00": 1}, "bad_text", "builtins.dict", "lone surrogate"),
    "deep_32": (nested(MAX_RESULT_DEPTH + 1), "too_deep", "builtins.list",
                f"nested more than {MAX_RESULT_DEPTH} levels"),
    "deep_40": ({"a": nested(39)}, "too_deep", "builtins.dict", "nested more than"),
    "deep_5000": (nested(5000), "too_deep", "builtins.list", "nested more than"),
    "deep_nul": ([nested(5000), "a\x00b"], "too_deep", "builtins.list", "nested more than"),
    "deep_100000": (nested(100_000), "too_deep", "builtins.list", "nested more than"),
    "huge": ("x" * (MAX_RESULT_BYTES + 1), "too_large", "builtins.str",
             f"more than the {MAX_RESULT_BYTES} bytes allowed"),
}


@pytest.mark.parametrize("case", list(UNSTORABLE))
def test_results_no_database_takes_the_same_way_are_refused(case):
    result, *_ = UNSTORABLE[case]
    with pytest.raises(kathikon.UnstorableOutcome) as info:
        storable_result(result)
    assert str(info.value).startswith("the result cannot be stored")


@pytest.mark.parametrize("case", list(UNSTORABLE))
def test_an_unstorable_result_is_replaced_by_a_marker_that_says_why(case):
    result, reason, kind, words = UNSTORABLE[case]
    marker, error = result_or_marker(result)
    assert isinstance(error, kathikon.UnstorableOutcome)
    assert marker == {UNSTORED: {"reason": reason, "type": kind, "message": str(error)}}
    assert reason in REASONS and words in str(error)
    assert storable_result(marker) == marker  # the marker itself is stored on every database


def test_the_marker_is_storable_whatever_the_result_and_its_error_say():
    marker, _ = result_or_marker(EvilName())
    assert marker[UNSTORED]["type"] == "evil\ufffd\ufffd.EvilName"
    assert storable_result(marker) == marker
    marker, _ = result_or_marker({"k": ReadFails(why="HEAD" + "x" * 100_000 + "TAIL")})
    message = marker[UNSTORED]["message"]
    assert len(message) <= MAX_MARKER_MESSAGE and message.endswith("TAIL)")
    assert "characters cut" in message


def test_results_nest_as_deep_as_args_and_no_deeper():
    assert MAX_RESULT_DEPTH == MAX_JSON_DEPTH == 31  # one rule for what goes in and comes out
    deepest = nested(MAX_RESULT_DEPTH)
    assert storable_result(deepest) == deepest
    assert result_or_marker(deepest) == (deepest, None)
    brackets = ["[" * 40, {"{": "]" * 40}]  # brackets in strings are no nesting
    assert storable_result(brackets) == brackets
    assert storable_result("[" * 40) == "[" * 40


def test_storable_results_are_returned_as_stored():
    assert storable_result({"a": (1, 2), 3: "😀"}) == {"a": [1, 2], "3": "😀"}
    assert storable_result("a \\u0000 literal backslash") == "a \\u0000 literal backslash"
    assert storable_result(None) is None
    assert result_or_marker({"a": (1, 2)}) == ({"a": [1, 2]}, None)
    assert storable_result(10**300) == 10**300  # a long int that is JSON stays one


def test_clamp_delay():
    assert clamp_delay(30) == 30
    assert clamp_delay(-5) == 0.0
    assert clamp_delay(1e12) == clamp_delay(math.inf) == MAX_DELAY == 365 * 86400
    assert clamp_delay(math.nan) is None and clamp_delay("10") is None and clamp_delay(True) is None
    # An int too large for a float (math.isnan overflowed on it) is just a long delay.
    assert clamp_delay(10**400) == clamp_delay(10**5000) == MAX_DELAY
    assert clamp_delay(-(10**400)) == 0.0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -1, "10", True])
def test_retry_and_snooze_refuse_bad_delays_when_built(bad):
    with pytest.raises(ValueError, match="Snooze needs"):
        kathikon.Snooze(bad)
    with pytest.raises(ValueError, match="Retry needs"):
        kathikon.Retry("x", in_seconds=bad)


def test_retry_and_snooze_clamp_long_delays():
    assert kathikon.Retry("x", in_seconds=1e12).in_seconds == MAX_DELAY
    assert kathikon.Retry("x", in_seconds=10**400).in_seconds == MAX_DELAY
    assert kathikon.Snooze(10**5000).seconds == MAX_DELAY
    with pytest.raises(ValueError, match="an int of"):  # not repr()'s ValueError
        kathikon.Snooze(-(10**5000))
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
