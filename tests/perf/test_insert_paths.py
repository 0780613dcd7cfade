"""insert_many's fast path (PostgreSQL COPY) stores exactly what insert stores, and wakes queues."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db import connections, transaction

import kathikon
from kathikon.models import Job
from tests import workers
from tests.connections import another_session, fresh_connection

TRICKY = {
    "tab": "a\tb", "newline": "a\nb", "backslash": "a\\b\\\\N", "quote": 'say "hi"',
    "null_text": "\\N", "unicode": "ünïcødé ✓ 🎉", "empty": "", "int": 2**40, "float": 0.1,
    "bool": True, "none": None, "list": [1, "two", [3.5, None]], "nested": {"k": {"j": [True]}},
}
COMPARED = ("queue", "worker", "args", "state", "priority", "max_attempts", "attempts",
            "errors", "attempted_by", "lease", "meta", "batch_id", "parent_job_id", "cron_id",
            "result", "started_at", "completed_at")


@pytest.mark.django_db
@pytest.mark.parametrize("copy", [True, False], ids=["copy", "unnest"])
def test_insert_many_stores_what_insert_stores(copy, monkeypatch):
    if not copy:  # the psycopg2 path (one INSERT … unnest per chunk) on PostgreSQL
        monkeypatch.setattr("kathikon.storage.inserts._can_copy", lambda: False)
    batch, parent = uuid.uuid4(), uuid.uuid4()
    options = {"queue": "emails", "priority": 7, "max_attempts": 3, "meta": {"m": "x\ty"},
               "batch_id": batch, "parent_job_id": parent.hex}
    single = kathikon.insert(workers.Succeed, TRICKY, **options)
    result = kathikon.insert_many([(workers.Succeed, TRICKY, options)] * 3, chunk_size=2)
    assert result.inserted == 3 and not result.errors
    stored = {job.id.hex: job for job in Job.objects.all()}
    reference = stored[single.id.hex]
    assert reference.args == TRICKY
    for hex_id in result.ids:
        job = stored[hex_id]
        assert {f: getattr(job, f) for f in COMPARED} == {f: getattr(reference, f)
                                                         for f in COMPARED}
        assert abs(job.inserted_at - reference.inserted_at) < dt.timedelta(seconds=30)


@pytest.mark.django_db
def test_insert_many_scheduled_and_immediate_rows():
    at = dt.datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=dt.timezone.utc)
    result = kathikon.insert_many([
        (workers.Succeed, {}, {"schedule_at": at}),
        (workers.Succeed, {}, {"schedule_in": 0}),
        (workers.Succeed, {}),
    ])
    first, second, third = (kathikon.fetch(i) for i in result.ids)
    assert (first.state, first.available_at, first.scheduled_at) == ("scheduled", at, at)
    assert second.state == third.state == "available"
    assert third.scheduled_at is None


@pytest.mark.django_db(transaction=True)
def test_insert_many_notifies_each_queue_with_available_jobs_once_on_commit(postgres_only):
    listener = _listener()
    try:
        kathikon.insert_many([(workers.Succeed, {"i": i}) for i in range(1200)]
                             + [(workers.Succeed, {}, {"queue": "emails"})]
                             + [(workers.Succeed, {}, {"queue": "later", "schedule_in": 60})])
        payloads = sorted(n.payload for n in listener.notifies(timeout=0.5))
    finally:
        listener.close()
    assert payloads == ["available default", "available emails"]


@pytest.fixture(params=["client_binding", "server_binding"])
def insert_cursor(request, postgres_only):
    """Kathikon's connection as Django makes it by default (psycopg's ClientCursor: insert and
    NOTIFY in one message) or with ``OPTIONS={"server_side_binding": True}`` (one CTE)."""
    if request.param == "client_binding":
        yield connections["default"]
        return
    with fresh_connection(OPTIONS={"server_side_binding": True}) as wrapper:
        yield wrapper


def _listener():
    listener = another_session()
    listener.execute("LISTEN kathikon")
    return listener


@pytest.mark.django_db(transaction=True)
def test_insert_stores_the_row_and_wakes_its_queue_on_commit_through_either_cursor(
        insert_cursor):
    from kathikon.storage import vendor

    listener = _listener()

    def woken() -> list[str]:
        return sorted(n.payload for n in listener.notifies(timeout=0.3))

    try:
        with insert_cursor.cursor() as cursor:
            server_binding = insert_cursor.settings_dict["OPTIONS"].get("server_side_binding")
            assert vendor.binds_on_client(cursor) is not server_binding
        now = kathikon.insert(workers.Succeed, TRICKY, queue="emails", priority=7,
                              meta={"m": "x\ty"}, batch_id=uuid.uuid4())
        later = kathikon.insert(workers.Succeed, {}, queue="later", schedule_in=60)
        assert woken() == ["available emails"]  # a scheduled job wakes nobody
        with transaction.atomic(using="default"):
            kathikon.insert(workers.Succeed, {}, queue="rolled")
            transaction.set_rollback(True, using="default")
        with transaction.atomic(using="default"):
            inside = kathikon.insert(workers.Succeed, {}, queue="inside")
            assert woken() == []  # NOTIFY is delivered on commit
        assert woken() == ["available inside"]
    finally:
        listener.close()
    stored = Job.objects.get(id=now.id)
    assert {f: getattr(stored, f) for f in COMPARED} == {f: getattr(now, f) for f in COMPARED}
    assert stored.args == TRICKY and stored.inserted_at == now.inserted_at
    assert Job.objects.get(id=later.id).state == "scheduled"
    assert Job.objects.filter(id=inside.id).exists()
    assert not Job.objects.filter(queue="rolled").exists()
