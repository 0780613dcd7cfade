"""Inserting into a queue nothing knows logs kathikon.W001 once, at no cost for known queues."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from django.core import checks
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

import kathikon
from kathikon import storage
from kathikon.known_queues import KnownQueues, known
from kathikon.models import Job
from tests import workers

pytestmark = pytest.mark.django_db


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def logged() -> Iterator[list[str]]:
    """The warnings of the ``kathikon`` logger (it does not propagate to the root)."""
    known.forget()
    handler = Records()
    logger = logging.getLogger("kathikon")
    logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        known.forget()


def _touches_queue_tables(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries
            if "kathikon_queue" in q["sql"] or "kathikon_node" in q["sql"]]


def test_an_insert_into_an_unknown_queue_warns_once_per_queue_with_the_likely_fix(logged):
    kathikon.insert(workers.Succeed, {}, queue="emials")
    kathikon.insert(workers.Succeed, {}, queue="emials")
    kathikon.insert_many([(workers.Succeed, {}, {"queue": "emials"})])
    assert len(logged) == 1
    assert logged[0].startswith("kathikon.W001: a job was inserted into the queue 'emials' "
                                "(did you mean 'emails'?)")
    assert "wait forever" in logged[0] and "--queues emials" in logged[0]
    kathikon.insert_many([(workers.Succeed, {}, {"queue": "imprts"}),
                          (workers.Succeed, {}, {"queue": "imprts"})])
    assert len(logged) == 2 and "'imprts'" in logged[1]
    assert Job.objects.count() == 5  # a warning, not a refusal


def test_queues_of_the_settings_a_row_or_a_live_node_are_known(logged):
    kathikon.insert(workers.Succeed, {})  # KATHIKON["QUEUES"]
    kathikon.insert(workers.Emails, {})
    kathikon.start_queue("imports")
    kathikon.insert(workers.Succeed, {}, queue="imports")
    storage.register_node("n1", queues={"by-hand": 1})
    kathikon.insert(workers.Succeed, {}, queue="by-hand")
    assert logged == []
    storage.mark_node_stopped("n1")
    known.forget()  # past the TTL
    kathikon.insert(workers.Succeed, {}, queue="by-hand")
    assert len(logged) == 1 and "'by-hand'" in logged[0]


def test_queues_the_tasks_backend_declares_are_known(logged, settings):
    settings.TASKS = {"default": {"BACKEND": "kathikon.backends.KathikonBackend",
                                  "QUEUES": ["default", "mail-out"]}}
    with CaptureQueriesContext(connection) as queries:
        kathikon.insert(workers.Succeed, {}, queue="mail-out")
    assert logged == [] and _touches_queue_tables(queries) == []


def test_an_insert_into_a_configured_queue_runs_no_extra_query(logged):
    with CaptureQueriesContext(connection) as first:  # nothing known yet in this process
        kathikon.insert(workers.Succeed, {})
    with CaptureQueriesContext(connection) as again:
        kathikon.insert(workers.Emails, {})
        kathikon.insert_many([(workers.Succeed, {}), (workers.Emails, {})])
    assert _touches_queue_tables(first) == _touches_queue_tables(again) == []
    assert len(first) == 1 and logged == []
    with CaptureQueriesContext(connection) as elsewhere:  # only a queue outside them is looked up
        kathikon.insert(workers.Succeed, {}, queue="imports")
    assert len(_touches_queue_tables(elsewhere)) == 2 and len(logged) == 1


def test_the_database_is_asked_once_per_ttl_and_a_warned_queue_never_again(logged):
    now = [0.0]
    names = KnownQueues(ttl=30, clock=lambda: now[0])
    kathikon.start_queue("imports")
    with CaptureQueriesContext(connection) as queries:
        for _ in range(3):
            names.notice("imports")
    assert len(_touches_queue_tables(queries)) == 2  # rows, live nodes: once
    now[0] = 31.0
    with CaptureQueriesContext(connection) as queries:
        names.notice("imports")
    assert len(_touches_queue_tables(queries)) == 2  # the answer expired
    with CaptureQueriesContext(connection) as queries:
        names.notice("typo")  # not in the answer: asked once more before warning
        names.notice("typo")
        now[0] = 100.0
        names.notice("typo")
    assert len(_touches_queue_tables(queries)) == 2 and len(logged) == 1


@pytest.mark.django_db(transaction=True)
def test_a_failed_lookup_inside_a_transaction_keeps_the_transaction(logged, monkeypatch):
    def broken(live_within: float) -> set[str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM kathikon_no_such_table")
        return set()

    monkeypatch.setattr(storage.queues, "known_queue_names", broken)
    with transaction.atomic():
        kathikon.insert(workers.Succeed, {}, queue="imports")
        kathikon.insert(workers.Succeed, {})  # the transaction still works
    assert Job.objects.count() == 2
    assert len(logged) == 1 and "looking up the known queues failed" in logged[0]


def _w001() -> list[str]:
    """W001 about this file's subjects: other tests define Worker classes of their own
    (with queues of their own), which the check sees too once they are imported."""
    return [m.msg for m in checks.run_checks() if m.id == "kathikon.W001"
            and ("tests.workers." in m.msg or "KATHIKON['CRON']" in m.msg)]


def test_check_warns_about_a_cron_entry_whose_queue_nobody_serves(settings):
    settings.TASKS = {}
    every = {"cron": "0 3 * * *"}
    settings.KATHIKON = {"QUEUES": {"default": {}, "reports": {}, "emails": {}}, "CRON": [
        {"name": "nightly", "worker": "tests.workers.Succeed", "queue": "reprots", **every},
        {"name": "mails", "worker": "tests.workers.Emails", **every},  # the worker's queue
        {"name": "gone", "worker": "tests.workers.Missing", **every},
    ]}
    assert _w001() == [
        "KATHIKON['CRON'][0] ('nightly') enqueues into the queue 'reprots', which is not in "
        "KATHIKON['QUEUES']: no kathikon_worker runs its jobs by default, so they wait "
        "forever. Did you mean 'reports'?"]
    settings.KATHIKON = {**settings.KATHIKON, "QUEUES": {"default": {}, "reports": {}}}
    assert [text.split(" the queue")[0] for text in _w001()] == [
        "Worker tests.workers.Emails uses", "KATHIKON['CRON'][0] ('nightly') enqueues into",
        "KATHIKON['CRON'][1] ('mails') enqueues into"]
