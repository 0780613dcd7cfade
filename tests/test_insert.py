"""insert, insert_many, build_row: validation, defaults, transactions, statement counts."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import kathikon
from kathikon import signals
from kathikon.jobspec import build_row
from kathikon.models import Job
from tests import workers

pytestmark = pytest.mark.django_db


def test_insert_stores_dotted_path_defaults_and_hex_id():
    job = kathikon.insert(workers.Succeed, {"n": 1})
    stored = kathikon.fetch(job.id.hex)
    assert stored.worker == "tests.workers.Succeed"
    assert stored.args == {"n": 1}
    assert stored.state == kathikon.JobState.AVAILABLE
    assert (stored.queue, stored.priority, stored.max_attempts, stored.attempts) == (
        "default", 0, 20, 0)
    assert len(job.id.hex) == 32
    assert stored.available_at == stored.inserted_at


def test_insert_takes_worker_class_defaults_and_explicit_options_win():
    job = kathikon.insert(workers.Emails, {})
    assert (job.queue, job.priority, job.max_attempts) == ("emails", 7, 4)
    job = kathikon.insert("tests.workers.Emails", {}, queue="bulk", priority=-3, max_attempts=1)
    stored = kathikon.fetch(job.id)
    assert (stored.queue, stored.priority, stored.max_attempts) == ("bulk", -3, 1)


def test_settings_give_the_global_max_attempts(settings):
    settings.KATHIKON = {"MAX_ATTEMPTS": 7}
    assert kathikon.insert(workers.Succeed).max_attempts == 7


def test_schedule_in_and_schedule_at_make_scheduled_jobs():
    job = kathikon.insert(workers.Succeed, {}, schedule_in=60)
    assert job.state == "scheduled"
    assert job.scheduled_at == job.available_at
    assert 59 <= (job.available_at - job.inserted_at).total_seconds() <= 61
    at = timezone.now() + dt.timedelta(hours=1)
    job = kathikon.insert(workers.Succeed, {}, schedule_at=at)
    assert (job.state, kathikon.fetch(job.id).available_at) == ("scheduled", at)
    assert kathikon.insert(workers.Succeed, {}, schedule_in=0).state == "available"
    past = timezone.now() - dt.timedelta(minutes=5)
    job = kathikon.insert(workers.Succeed, {}, schedule_at=past)
    assert job.state == "available"
    assert job.scheduled_at == past


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"args": {"when": dt.datetime(2026, 1, 1)}}, "args['when']"),
    ({"args": {"x": math.nan}}, "args['x']"),
    ({"args": {"t": (1, 2)}}, "args['t']"),
    ({"args": {1: "int key"}}, "args[1]"),
    ({"args": ["not", "a", "dict"]}, "args"),
    ({"queue": "bad queue!"}, "queue"),
    ({"queue": "x" * 64}, "queue"),
    ({"queue": ""}, "queue"),
    ({"priority": 101}, "priority"),
    ({"priority": -101}, "priority"),
    ({"priority": 1.5}, "priority"),
    ({"priority": True}, "priority"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"max_attempts": "3"}, "max_attempts"),
    ({"schedule_in": -1}, "schedule_in"),
    ({"schedule_in": math.inf}, "schedule_in"),
    ({"schedule_in": "soon"}, "schedule_in"),
    ({"schedule_at": dt.datetime(2030, 1, 1)}, "schedule_at"),
    ({"schedule_at": "2030-01-01"}, "schedule_at"),
    ({"schedule_in": 5, "schedule_at": timezone.now()}, "schedule_in"),
    ({"colour": "red"}, "colour"),
    ({"meta": "x"}, "meta"),
])
def test_invalid_input_names_the_key_and_inserts_nothing(kwargs, key):
    args = kwargs.pop("args", {})
    with pytest.raises(kathikon.InvalidJob) as info:
        kathikon.insert(workers.Succeed, args, **kwargs)
    assert info.value.key == key
    assert isinstance(info.value, ValueError)
    assert Job.objects.count() == 0


@pytest.mark.parametrize("worker", [
    "tests.workers.Missing", "no.such.module.Worker", "tests.workers.NotAWorker", "Succeed", 42,
    workers.NotAWorker,
])
def test_unknown_or_invalid_workers_are_refused_at_insert(worker):
    with pytest.raises(kathikon.InvalidJob) as info:
        kathikon.insert(worker, {})
    assert info.value.key == "worker"
    assert Job.objects.count() == 0


def test_worker_defined_in_a_function_is_refused():
    class Local(kathikon.Worker):
        def perform(self, job):
            return None

    with pytest.raises(kathikon.InvalidJob, match="inside a function"):
        kathikon.insert(Local, {})


@pytest.mark.django_db(transaction=True)
def test_insert_joins_the_callers_transaction():
    with transaction.atomic():
        kathikon.insert(workers.Succeed, {"kept": True})
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        kathikon.insert(workers.Succeed, {"kept": False})
        1 / 0  # noqa: B018
    assert [job.args for job in kathikon.all()] == [{"kept": True}]


def test_insert_sends_job_inserted_with_the_worker_as_sender():
    seen = []

    def receiver(sender, job, **kwargs):
        seen.append((sender, job.id))

    signals.job_inserted.connect(receiver)
    try:
        job = kathikon.insert(workers.Succeed, {})
    finally:
        signals.job_inserted.disconnect(receiver)
    assert seen == [(workers.Succeed, job.id)]


def test_job_ids_are_time_ordered():
    ids = [kathikon.insert(workers.Succeed, {"i": i}).id for i in range(20)]
    assert ids == sorted(ids)
    assert [job.id for job in kathikon.all()] == ids


def test_insert_many_inserts_good_specs_and_reports_bad_ones_by_index():
    result = kathikon.insert_many([
        (workers.Succeed, {"i": 0}),
        (workers.Succeed, {"i": 1}, {"queue": "emails", "priority": 5}),
        ("tests.workers.Missing", {}),
        (workers.Succeed, {"bad": object()}),
        ("just one element",),
        (workers.Succeed, {}, {"priority": 500}),
    ])
    assert result.inserted == 2
    assert [index for index, _ in result.errors] == [2, 3, 4, 5]
    assert "priority" in result.errors[3][1]
    stored = {job.id.hex: job for job in kathikon.all()}
    assert list(stored) == result.ids
    assert stored[result.ids[1]].queue == "emails"
    assert stored[result.ids[1]].priority == 5


def test_insert_many_option_less_specs_of_one_worker_each_keep_their_own_args_and_key():
    """Option-less specs of one worker share what was decided from the worker (one plan);
    each row still gets its own id, args and unique key, by class or by dotted path."""
    result = kathikon.insert_many([
        (workers.SyncAccount, {"account_id": 1}),
        ("tests.workers.SyncAccount", {"account_id": 2}),
        (workers.SyncAccount, {"account_id": 1}),  # held by the first
        (workers.SyncAccount, {"account_id": 3}, {"queue": "other"}),
        (workers.SyncAccount, {"account_id": "x" * 3, "bad": object()}),
        (workers.Succeed, {"i": 1}),
        ("tests.workers.Succeed", {"i": 2}),
    ])
    assert result.inserted == 5 and result.conflicts == [2]
    assert [index for index, _ in result.errors] == [4]
    jobs = [kathikon.fetch(hex_id) for hex_id in result.ids]
    assert jobs[2].id == jobs[0].id
    assert [job.args for job in jobs] == [{"account_id": 1}, {"account_id": 2},
                                          {"account_id": 1}, {"account_id": 3}, {"i": 1},
                                          {"i": 2}]
    assert len({job.id for job in jobs}) == 5
    assert len({job.unique_key for job in jobs[:4]}) == 3
    assert [job.queue for job in jobs] == ["default"] * 3 + ["other"] + ["default"] * 2


def test_insert_many_uses_one_statement_per_chunk():
    specs = [(workers.Succeed, {"i": i}) for i in range(1000)]
    with CaptureQueriesContext(connection) as queries:
        result = kathikon.insert_many(specs, chunk_size=500)
    assert result.inserted == 1000
    inserts = [q["sql"] for q in queries.captured_queries
               if "INSERT" in q["sql"].upper() or q["sql"].startswith("COPY ")]
    if connection.vendor == "sqlite":
        # Django splits a chunk by SQLite's bound-parameter limit; still bulk, never per job.
        assert len(inserts) <= 1000 // 20
    else:
        assert len(inserts) == 2
    assert Job.objects.count() == 1000


def test_insert_many_with_scheduled_specs_and_bad_chunk_size():
    result = kathikon.insert_many([(workers.Succeed, {}, {"schedule_in": 30})])
    assert kathikon.fetch(result.ids[0]).state == "scheduled"
    with pytest.raises(kathikon.InvalidJob):
        kathikon.insert_many([], chunk_size=0)


def test_build_row_makes_an_unsaved_validated_job():
    job = build_row(workers.Succeed, {"x": 1}, {"queue": "q1", "priority": 2}).to_job()
    assert (job.queue, job.priority, job.worker) == ("q1", 2, "tests.workers.Succeed")
    assert job._state.adding
    assert Job.objects.count() == 0
    with pytest.raises(kathikon.InvalidJob):
        build_row(workers.Succeed, {"x": object()}, {})


def test_is_claimable():
    now = timezone.now()
    job = build_row(workers.Succeed, {}, {}).to_job()
    assert job.is_claimable(now + dt.timedelta(seconds=1))
    job.available_at = now + dt.timedelta(seconds=10)
    assert not job.is_claimable(now)
    job.available_at = now
    for state in kathikon.JobState.values:
        job.state = state
        assert job.is_claimable(now) == (state in ("available", "retryable"))


def test_job_build_is_an_unsaved_job_validated_like_insert():
    job = Job.build(workers.Succeed, {"n": 1}, queue="emails", priority=2)
    assert (job.worker, job.args, job.queue, job.priority) == (
        "tests.workers.Succeed", {"n": 1}, "emails", 2)
    assert job.state == kathikon.JobState.AVAILABLE and job.attempts == 0
    assert not Job.objects.filter(id=job.id).exists()
    with pytest.raises(kathikon.InvalidJob) as refused:
        Job.build(workers.Succeed, {"n": 1}, priority=1000)
    assert refused.value.key == "priority"
    assert Job.objects.count() == 0
