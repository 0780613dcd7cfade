"""Unique jobs: one job per key while it is in its unique states, enforced by the database."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import kathikon
from kathikon import storage
from kathikon.executor import run_job, settle
from kathikon.models import Job
from kathikon.unique import ALL, MIN_PERIOD, UNSTARTED, Unique
from tests import workers
from tests.connections import another_session

pytestmark = pytest.mark.django_db


def _run(queue: str = "default") -> list[Job]:
    jobs = storage.claim_jobs(queue, 100, "n1")
    settle([run_job(job) for job in jobs])
    return jobs


def test_a_duplicate_returns_the_existing_job_marked_as_a_conflict():
    first = kathikon.insert(workers.SyncAccount, {"account_id": 7, "note": "a"})
    again = kathikon.insert(workers.SyncAccount, {"account_id": 7, "note": "b"})
    other = kathikon.insert(workers.SyncAccount, {"account_id": 8})
    assert (first.conflict, again.conflict, other.conflict) == (False, True, False)
    assert again.id == first.id
    assert again.args == {"account_id": 7, "note": "a"}  # the existing job, unchanged
    assert Job.objects.count() == 2
    assert Job.objects.get(pk=first.id).unique_key == first.unique_key is not None


def test_the_insert_option_overrides_the_worker_and_false_turns_it_off():
    kathikon.insert(workers.Succeed, {"a": 1}, unique=True)
    assert kathikon.insert(workers.Succeed, {"a": 1}, unique=True).conflict
    assert not kathikon.insert(workers.Succeed, {"a": 2}, unique=True).conflict
    assert not kathikon.insert(workers.Succeed, {"a": 1}).conflict  # not unique: a new job
    assert not kathikon.insert(workers.SyncAccount, {"account_id": 1}, unique=False).conflict
    assert not kathikon.insert(workers.SyncAccount, {"account_id": 1}, unique=False).conflict
    assert Job.objects.count() == 5


def test_by_queue_worker_args_and_meta_keys():
    by_args = Unique(by=["args"])
    kathikon.insert(workers.Succeed, {"x": 1}, unique=by_args)
    assert kathikon.insert(workers.ReturnsNothing, {"x": 1}, unique=by_args).conflict
    by_queue = {"by": ["worker", "queue"]}
    kathikon.insert(workers.Succeed, {"x": 1}, queue="q1", unique=by_queue)
    assert kathikon.insert(workers.Succeed, {"x": 2}, queue="q1", unique=by_queue).conflict
    assert not kathikon.insert(workers.Succeed, {"x": 2}, queue="q2", unique=by_queue).conflict
    by_meta = Unique(by=["worker", "meta"], meta_keys=["tenant"])
    kathikon.insert(workers.Succeed, {}, meta={"tenant": "t", "trace": 1}, unique=by_meta)
    assert kathikon.insert(workers.Succeed, {}, meta={"tenant": "t", "trace": 2},
                           unique=by_meta).conflict
    assert not kathikon.insert(workers.Succeed, {}, meta={"tenant": "u"}, unique=by_meta).conflict


@pytest.mark.parametrize(("unique", "message"), [
    ({"by": ["colour"]}, "unique by"),
    ({"period": 0}, "period"),
    ({"period": "1h"}, "period"),
    # Each overflowed the bucket number (epoch / period) or a float conversion.
    ({"period": 1e-320}, "period"),
    ({"period": 5e-324}, "period"),
    ({"period": 1e-7}, "period"),
    ({"period": float("nan")}, "period"),
    ({"period": float("inf")}, "period"),
    ({"period": 10**400}, "period"),
    ({"period": 10**5000}, "period"),
    ({"states": ["done"]}, "unique states"),
    ({"replace": ["queue"]}, "replace"),
    ({"keys": "account_id"}, "list of names"),
    ({"colour": 1}, "unique"),
    ("yes", "unique must be"),
])
def test_bad_unique_options_are_typed_errors_naming_the_key(unique: Any, message: str):
    with pytest.raises(kathikon.InvalidJob, match=message) as caught:
        kathikon.insert(workers.Succeed, {}, unique=unique)
    assert caught.value.key == "unique"
    assert Job.objects.count() == 0


def test_the_extreme_periods_that_are_accepted_give_a_key():
    for period in (MIN_PERIOD, 1e300, 10**300):
        job = kathikon.insert(workers.Succeed, {"p": str(period)}, unique={"period": period})
        assert job.unique_key and not job.conflict


def test_a_period_gives_one_job_per_bucket():
    unique = Unique(period=60)
    first = kathikon.insert(workers.Succeed, {"r": 1}, unique=unique)
    assert kathikon.insert(workers.Succeed, {"r": 1}, unique=unique).conflict
    later = unique.key(first.worker, first.queue, first.args, {},
                       timezone.now() + dt.timedelta(seconds=60))
    assert later != first.unique_key  # the next bucket has another key


def test_completing_frees_the_key_in_the_ack_and_all_states_keep_it():
    job = kathikon.insert(workers.SyncAccount, {"account_id": 1})
    kept = kathikon.insert(workers.Succeed, {"k": 1}, unique=Unique(states=ALL))
    _run()
    assert Job.objects.get(pk=job.id).unique_key is None
    assert Job.objects.get(pk=kept.id).unique_key == kept.unique_key
    assert not kathikon.insert(workers.SyncAccount, {"account_id": 1}).conflict
    assert kathikon.insert(workers.Succeed, {"k": 1}, unique=Unique(states=ALL)).conflict


def test_unstarted_keys_are_freed_by_the_claim_and_stay_freed():
    job = kathikon.insert(workers.FailOnce, {})
    assert kathikon.insert(workers.FailOnce, {}).conflict
    _run()
    stored = Job.objects.get(pk=job.id)
    assert (stored.state, stored.unique_key) == ("retryable", None)
    assert not kathikon.insert(workers.FailOnce, {}).conflict


def test_cancel_and_rescue_free_the_key():
    job = kathikon.insert(workers.SyncAccount, {"account_id": 1})
    kathikon.cancel(job.id)
    assert Job.objects.get(pk=job.id).unique_key is None
    job = kathikon.insert(workers.SyncAccount, {"account_id": 1}, max_attempts=1)
    assert not job.conflict
    storage.claim_jobs("default", 1, "gone")
    storage.rescue_jobs(nodes=["gone"], send_signals=False)
    assert Job.objects.get(pk=job.id).state == "dead"
    assert Job.objects.get(pk=job.id).unique_key is None
    assert not kathikon.insert(workers.SyncAccount, {"account_id": 1}).conflict


def test_scheduled_outside_the_states_holds_no_key_and_promotion_keeps_a_held_one():
    late = Unique(states=["available"])
    job = kathikon.insert(workers.Succeed, {}, schedule_in=0.01, unique=late)
    assert job.unique_key is None
    held = kathikon.insert(workers.Succeed, {"p": 2}, schedule_in=0.01,
                           unique=Unique(states=UNSTARTED))
    assert held.unique_key is not None
    assert storage.promote_scheduled(timezone.now() + dt.timedelta(seconds=1)) == 2
    assert Job.objects.get(pk=held.id).unique_key == held.unique_key
    assert Job.objects.get(pk=job.id).unique_key is None  # a freed key is never taken back


def test_replace_overwrites_chosen_fields_of_a_pending_job_only():
    unique = Unique(keys=["id"], replace=["scheduled_at", "priority", "args"])
    first = kathikon.insert(workers.Succeed, {"id": 1, "v": 1}, schedule_in=600, unique=unique)
    at = timezone.now() + dt.timedelta(hours=2)
    again = kathikon.insert(workers.Succeed, {"id": 1, "v": 2}, schedule_at=at, priority=5,
                            unique=unique)
    assert again.conflict and again.id == first.id
    stored = Job.objects.get(pk=first.id)
    assert (stored.args, stored.priority, stored.scheduled_at, stored.available_at,
            stored.state) == ({"id": 1, "v": 2}, 5, at, at, "scheduled")
    now = kathikon.insert(workers.Succeed, {"id": 1, "v": 3}, unique=unique)
    assert Job.objects.get(pk=now.id).state == "available"
    storage.claim_jobs("default", 1, "n1")
    kathikon.insert(workers.Succeed, {"id": 1, "v": 4}, priority=9, unique=unique)
    assert Job.objects.get(pk=first.id).args == {"id": 1, "v": 3}  # running: left alone


def test_insert_many_reports_duplicates_and_returns_the_holders_ids():
    existing = kathikon.insert(workers.SyncAccount, {"account_id": 1})
    result = kathikon.insert_many([
        (workers.SyncAccount, {"account_id": 1}),
        (workers.SyncAccount, {"account_id": 2}),
        (workers.Succeed, {}),
        (workers.SyncAccount, {"account_id": 2, "again": True}),
        (workers.SyncAccount, {"account_id": "bad"}, {"priority": 500}),
    ])
    assert result.inserted == 2
    assert result.conflicts == [0, 3]
    assert [index for index, _ in result.errors] == [4]
    assert result.ids[0] == existing.id.hex
    assert result.ids[3] == result.ids[1] != existing.id.hex
    assert Job.objects.count() == 3


def test_insert_many_with_keys_is_one_insert_statement_per_chunk(vendor):
    specs = [(workers.SyncAccount, {"account_id": i}) for i in range(120)]
    with CaptureQueriesContext(connection) as queries:
        result = kathikon.insert_many(specs, chunk_size=50)
    inserts = [q for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(
        ("INSERT", "WITH"))]
    assert len(inserts) == 3
    assert result.inserted == 120 and not result.conflicts
    with CaptureQueriesContext(connection) as queries:
        again = kathikon.insert_many(specs, chunk_size=50)
    assert again.conflicts == list(range(120)) and again.inserted == 0
    assert len([q for q in queries.captured_queries if "kathikon_job" in q["sql"]]) <= 6


def test_freeing_keys_costs_no_extra_statement_in_the_ack():
    kathikon.insert_many([(workers.ReturnsNothing, {"i": i}) for i in range(20)])
    plain = storage.claim_jobs("default", 20, "n1")
    with CaptureQueriesContext(connection) as plain_acks:
        settle([run_job(job) for job in plain])
    kathikon.insert_many([(workers.ReturnsNothing, {"i": i}, {"unique": True})
                          for i in range(20)])
    keyed = storage.claim_jobs("default", 20, "n1")
    assert all(job.unique_key for job in keyed)
    with CaptureQueriesContext(connection) as keyed_acks:
        settle([run_job(job) for job in keyed])
    assert len(keyed_acks) == len(plain_acks)
    assert not Job.objects.filter(unique_key__isnull=False).exists()


def test_a_rolled_back_unique_insert_frees_nothing_and_keeps_nothing():
    with pytest.raises(RuntimeError), transaction.atomic():
        kathikon.insert(workers.SyncAccount, {"account_id": 5})
        raise RuntimeError
    assert not kathikon.insert(workers.SyncAccount, {"account_id": 5}).conflict


# -- concurrency: 8 threads, 1,000 inserts of one unique job ------------------------------

def _hammer(insert_one: Any, threads: int = 8, total: int = 1000) -> list[str]:
    got: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(threads)
    lock = threading.Lock()

    def inserter() -> None:
        try:
            start.wait()
            mine = [insert_one() for _ in range(total // threads)]
            with lock:
                got.extend(mine)
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connections.close_all()

    pool = [threading.Thread(target=inserter) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(300)
    assert not errors, errors[:3]
    assert len(got) == total
    return got


@pytest.mark.django_db(transaction=True)
def test_eight_threads_insert_one_unique_job_a_thousand_times():
    def insert_one() -> str:
        return kathikon.insert(workers.SyncAccount, {"account_id": 42}).id.hex

    got = _hammer(insert_one)
    assert Job.objects.count() == 1
    assert set(got) == {Job.objects.get().id.hex}


@pytest.mark.django_db(transaction=True)
def test_eight_threads_insert_many_one_unique_job_a_thousand_times():
    def insert_one() -> str:
        result = kathikon.insert_many([(workers.SyncAccount, {"account_id": 42}),
                                       (workers.SyncAccount, {"account_id": 43})])
        assert len(set(result.ids)) == 2
        return result.ids[0]

    got = _hammer(insert_one)
    assert Job.objects.count() == 2
    assert set(got) == {Job.objects.get(args__account_id=42).id.hex}


@pytest.mark.django_db(transaction=True)
def test_eight_threads_with_a_period_get_one_job_per_bucket():
    unique = Unique(period=0.5)

    def insert_one() -> str:
        return kathikon.insert(workers.Succeed, {"tick": 1}, unique=unique).id.hex

    got = _hammer(insert_one)
    jobs = list(Job.objects.all())
    buckets = Counter(int(job.inserted_at.timestamp() // 0.5) for job in jobs)
    assert len(jobs) >= 1
    assert set(buckets.values()) == {1}  # never two jobs in one bucket
    assert set(got) == {job.id.hex for job in jobs}  # every caller got one of them back


@pytest.mark.django_db(transaction=True)
def test_keys_freed_under_concurrency_let_exactly_one_new_job_in():
    first = kathikon.insert(workers.SyncAccount, {"account_id": 9})
    _run()
    assert Job.objects.get(pk=first.id).state == "completed"

    def insert_one() -> str:
        return kathikon.insert(workers.SyncAccount, {"account_id": 9}).id.hex

    got = _hammer(insert_one, total=400)
    second = Job.objects.exclude(pk=first.id).get()
    assert set(got) == {second.id.hex}


@pytest.mark.django_db(transaction=True)
def test_unique_inserts_wake_workers_only_when_a_job_was_inserted(postgres_only):
    listener = another_session()
    try:
        listener.execute("LISTEN kathikon")
        kathikon.insert(workers.SyncAccount, {"account_id": 1}, queue="one")
        kathikon.insert_many([(workers.SyncAccount, {"account_id": 2}, {"queue": "many"}),
                              (workers.SyncAccount, {"account_id": 3}, {"queue": "many"})])
        first = sorted(n.payload for n in listener.notifies(timeout=0.5))
        kathikon.insert(workers.SyncAccount, {"account_id": 1}, queue="one")
        kathikon.insert_many([(workers.SyncAccount, {"account_id": 2}, {"queue": "many"})])
        again = [n.payload for n in listener.notifies(timeout=0.5)]
    finally:
        listener.close()
    assert first == ["available many", "available one"]
    assert again == []
