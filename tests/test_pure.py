"""Pure helpers: backoff, job ids, worker resolution (no database)."""

from __future__ import annotations

import itertools
import random
import uuid

import pytest

import kathikon
from kathikon.backoff import MAX_SECONDS, failure_delay, with_jitter
from kathikon.ids import id_stream, new_id, new_ids, parse_id
from kathikon.workers import resolve_worker


def test_failure_delay_doubles_up_to_its_cap():
    assert [failure_delay(n, base=0.1, cap=1.0) for n in range(6)] == [
        0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert failure_delay(10**9, base=0.5, cap=30.0) == 30.0  # no overflow after a long outage
    assert failure_delay(-1, base=0.5, cap=30.0) == 0.5


def test_backoff_seconds():
    assert kathikon.backoff_seconds(2) == 20
    assert [kathikon.backoff_seconds(n) for n in range(5)] == [5, 10, 20, 40, 80]
    assert kathikon.backoff_seconds(100) == MAX_SECONDS
    assert kathikon.backoff_seconds(-3) == 5


def test_jitter_adds_at_most_ten_percent():
    rng = random.Random(1)
    values = [with_jitter(100, rng=rng) for _ in range(200)]
    assert all(100 <= v <= 110 for v in values)
    assert len(set(values)) > 100
    assert with_jitter(0) == 0


def test_ids_are_uuid7_unique_and_increasing():
    ids = [new_id() for _ in range(10000)]
    assert len(set(ids)) == 10000
    assert ids == sorted(ids)
    assert {i.version for i in ids} == {7}


def test_ids_made_in_bulk_interleave_with_single_ones_in_order():
    made = [new_id(), *new_ids(6000), new_id(), *itertools.islice(id_stream(batch=100), 250),
            new_id()]
    assert len(set(made)) == len(made) == 6253
    assert made == sorted(made)  # over 4096 in a millisecond borrow the next one, in order
    assert {i.version for i in made} == {7}
    assert len({i.int & ((1 << 62) - 1) for i in made}) == len(made)  # random bits differ


def test_parse_id_accepts_hex_dashed_and_uuid():
    value = new_id()
    assert parse_id(value.hex) == value
    assert parse_id(str(value)) == value
    assert parse_id(value) == value
    assert parse_id("nope") is None
    assert parse_id(12) is None
    assert isinstance(parse_id(uuid.uuid4().hex), uuid.UUID)


def test_resolve_worker():
    from tests.workers import Succeed

    assert resolve_worker("tests.workers.Succeed") is Succeed
    for bad in ("tests.workers.NotAWorker", "tests.nothing.X", "x"):
        with pytest.raises(kathikon.InvalidJob):
            resolve_worker(bad)


def test_outcomes_are_not_kathikon_errors():
    for outcome in (kathikon.Retry("x"), kathikon.Discard("x"), kathikon.Snooze(1)):
        assert not isinstance(outcome, kathikon.KathikonError)
    with pytest.raises(ValueError):
        kathikon.Snooze(-1)


def test_error_messages_default_to_the_docstring():
    assert str(kathikon.JobNotFound()) == "No job has that id."
    assert kathikon.InvalidState(state="dead").state == "dead"
