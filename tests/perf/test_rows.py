"""Jobs built from raw claim rows are the same objects the ORM builds."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models.signals import post_init

import kathikon
from kathikon.models import Job
from kathikon.storage.rows import JOB_COLUMNS, jobs_from_rows
from tests import workers


def _raw_rows():
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {JOB_COLUMNS} FROM kathikon_job ORDER BY id")
        return cursor.fetchall()


def _same(built: Job, orm: Job) -> None:
    assert type(built) is Job
    assert {k: v for k, v in built.__dict__.items() if k != "_state"} == {
        k: v for k, v in orm.__dict__.items() if k != "_state"}
    assert (built._state.adding, built._state.db) == (False, orm._state.db)
    assert built == orm and built.pk == orm.pk


@pytest.mark.django_db
@pytest.mark.parametrize("with_receiver", [False, True], ids=["fast", "post_init receiver"])
def test_jobs_from_rows_match_the_orm(postgres_only, with_receiver):
    kathikon.insert(workers.Succeed, {"a": [1, {"b": None}]}, meta={"m": 1}, priority=3)
    kathikon.insert(workers.Succeed, {})
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance)

    if with_receiver:
        post_init.connect(receiver, sender=Job)
    try:
        built = jobs_from_rows(_raw_rows(), connection.alias)
    finally:
        post_init.disconnect(receiver, sender=Job)
    orm = list(Job.objects.order_by("id"))
    assert len(built) == len(orm) == 2
    for b, o in zip(built, orm, strict=True):
        _same(b, o)
    assert len(seen) == (2 if with_receiver else 0)  # the receiver saw every built job
    # fresh containers are independent objects
    built[1].args["x"] = 1
    built[1].errors.append("e")
    again = jobs_from_rows(_raw_rows(), connection.alias)
    assert again[1].args == {} and again[1].errors == []
    built[0].save(update_fields=["priority"])  # a normal model instance


@pytest.mark.parametrize("with_receiver", [False, True], ids=["fast", "pre_init receiver"])
def test_unsaved_jobs_match_model_init(with_receiver):
    from django.db.models.signals import pre_init

    from kathikon.jobspec import build_row

    row = build_row(workers.Succeed, {"a": 1}, {"queue": "q", "meta": {"m": 2},
                                                 "batch_id": "0" * 32})
    seen = []

    def receiver(sender, **kwargs):
        seen.append(sender)

    if with_receiver:
        pre_init.connect(receiver, sender=Job)
    try:
        built = row.to_job()
    finally:
        pre_init.disconnect(receiver, sender=Job)
    reference = Job(id=row.id, queue=row.queue, worker=row.worker, args=row.args,
                    state=row.state, priority=row.priority, max_attempts=row.max_attempts,
                    attempts=0, scheduled_at=row.scheduled_at, available_at=row.available_at,
                    inserted_at=row.inserted_at, errors=[], meta=row.meta,
                    batch_id=row.batch_id, parent_job_id=row.parent_job_id,
                    cron_id=row.cron_id)
    assert list(built.__dict__) == list(reference.__dict__)
    assert {k: v for k, v in built.__dict__.items() if k != "_state"} == {
        k: v for k, v in reference.__dict__.items() if k != "_state"}
    assert (built._state.adding, built._state.db) == (True, None)
    assert built.errors is not reference.errors
    assert len(seen) == (1 if with_receiver else 0)


@pytest.mark.django_db
@pytest.mark.parametrize("limited", [False, True], ids=["claim", "limited claim"])
def test_a_claimed_job_is_the_job_the_orm_reads(postgres_only, limited):
    """The claims load timestamps with psycopg's own loader and trust its UUIDs; the job
    they build is still the ORM's, down to each datetime's tzinfo object."""
    import datetime as dt

    from kathikon import storage
    from kathikon.limits import Limits
    from kathikon.storage.limited import claim_limited_jobs

    kathikon.insert(workers.Succeed, {"a": [1, {"b": None}]}, meta={"m": 1})
    if limited:
        (claimed,) = claim_limited_jobs("default", 5, "rows-node", Limits(global_limit=3)).jobs
    else:
        (claimed,) = storage.claim_jobs("default", 5, "rows-node")
    orm = Job.objects.get(id=claimed.id)
    _same(claimed, orm)
    fields = ("available_at", "inserted_at", "started_at")
    assert all(getattr(claimed, f).tzinfo is dt.timezone.utc for f in fields)
    assert all(getattr(orm, f).tzinfo is dt.timezone.utc for f in fields)
