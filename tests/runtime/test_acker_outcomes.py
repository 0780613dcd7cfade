"""The acker retries only what heals; a refused outcome becomes a failed attempt (a refused
result: a completion with the marker of kathikon.storable); a retried ack
that holds a batch parent changes nothing twice. In-process, on every database."""

from __future__ import annotations

import copy
import datetime as dt
from unittest.mock import ANY

import pytest
from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    IntegrityError,
    connection,
    connections,
    transaction,
)

import kathikon
from kathikon import Batch, storage
from kathikon.executor import record, run_job
from kathikon.models import Job
from kathikon.runtime import acker as acker_module
from kathikon.runtime.acker import Acker
from kathikon.storable import UNSTORED
from kathikon.storage import is_transient
from kathikon.storage.batches import AWAITING
from kathikon.storage.errors import lost_a_race
from tests import workers
from tests.runtime.result_workers import nested

from .conftest import connection_lost

NODE = "acker-node"


def claim_all(limit: int = 100) -> list[Job]:
    return storage.claim_jobs("default", limit, NODE)


def other_connection(**options):
    """A second connection to the test database (SQLite: one that does not wait for locks)."""
    other = connections[DEFAULT_DB_ALIAS].copy()
    other.settings_dict["OPTIONS"] = {**copy.deepcopy(other.settings_dict["OPTIONS"]),
                                      **options}
    other.connect()
    return other


def error_of(statement, other) -> DatabaseError:
    with pytest.raises(DatabaseError) as info, other.cursor() as cursor:
        statement(cursor)
    return info.value


# -- classification: real errors from the real database --------------------------------------

def test_acker_classifies_a_lock_it_could_not_get_as_transient(transactional_db, vendor):
    job = kathikon.insert(workers.Succeed, {})
    table = connection.ops.quote_name(Job._meta.db_table)
    other = other_connection(**({"timeout": 0} if vendor == "sqlite" else {}))
    try:
        if vendor == "postgresql":
            other.cursor().execute("SET lock_timeout = '50ms'")
        elif vendor == "mysql":
            other.cursor().execute("SET SESSION innodb_lock_wait_timeout = 1")
        other.set_autocommit(False)
        with transaction.atomic():
            list(Job.objects.select_for_update().filter(id=job.id))
            if vendor == "sqlite":
                Job.objects.filter(id=job.id).update(priority=1)  # takes the writer lock
            error = error_of(lambda cursor: cursor.execute(
                f"UPDATE {table} SET priority = 2 WHERE id = %s",
                [job.id.hex if vendor != "postgresql" else job.id]), other)
        other.rollback()
    finally:
        other.close()
    assert is_transient(error), repr(error.__cause__)
    # a lock wait that timed out lost a race (a unique insert runs again); SQLite's busy
    # writer lock is waited on, never raced for
    assert lost_a_race(error) is (vendor != "sqlite"), repr(error.__cause__)


def test_acker_classifies_a_lost_connection_as_transient(transactional_db, vendor):
    if vendor == "sqlite":
        pytest.skip("SQLite has no server connection to lose")
    other = other_connection()
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()" if vendor == "postgresql"
                           else "SELECT CONNECTION_ID()")
            pid = cursor.fetchone()[0]
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)" if vendor == "postgresql"
                           else f"KILL {int(pid)}", [pid] if vendor == "postgresql" else None)
        error = error_of(lambda cursor: cursor.execute("SELECT 1"), other)
    finally:
        other.close()
    assert is_transient(error), repr(error.__cause__)
    assert is_transient(connection_lost())
    assert not lost_a_race(error) and not lost_a_race(connection_lost())


def test_acker_classifies_refused_values_and_bugs_as_permanent(transactional_db, vendor):
    job = kathikon.insert(workers.Succeed, {})
    with pytest.raises(IntegrityError) as duplicate, transaction.atomic():
        Job.objects.create(id=job.id, worker=job.worker, queue="default")
    assert not is_transient(duplicate.value) and not lost_a_race(duplicate.value)
    if vendor == "postgresql":  # the database refuses NUL in text: never heals
        with pytest.raises(DatabaseError) as nul, transaction.atomic():
            Job.objects.filter(id=job.id).update(worker="a\x00b")
        assert not is_transient(nul.value)
    assert not is_transient(ValueError("a bug"))
    assert not is_transient(OverflowError("date value out of range"))


def test_acker_classifies_driver_errors_that_heal():
    import sqlite3

    import MySQLdb
    import psycopg
    from django.db import utils

    def wrapped(cause: Exception, kind=utils.OperationalError) -> Exception:
        error = kind(*cause.args)
        error.__cause__ = cause
        return error

    assert is_transient(wrapped(psycopg.errors.SerializationFailure("x")))
    assert is_transient(wrapped(psycopg.errors.DeadlockDetected("x")))
    assert is_transient(wrapped(psycopg.errors.AdminShutdown("x")))
    assert not is_transient(wrapped(psycopg.errors.UntranslatableCharacter("x"), utils.DataError))
    assert not is_transient(wrapped(psycopg.errors.QueryCanceled("x")))
    assert is_transient(wrapped(MySQLdb.OperationalError(1213, "Deadlock found")))
    assert is_transient(wrapped(MySQLdb.OperationalError(2006, "Server has gone away")))
    assert not is_transient(wrapped(MySQLdb.OperationalError(3140, "Invalid JSON text")))
    assert is_transient(wrapped(sqlite3.OperationalError("database is locked")))
    assert not is_transient(wrapped(sqlite3.OperationalError("no such table: x")))
    assert is_transient(utils.InterfaceError("connection already closed"))


# -- the acker: permanent errors never hold up the batch -------------------------------------

def test_acker_writes_the_batch_around_an_outcome_the_database_refuses(transactional_db):
    kathikon.insert_many([(workers.Succeed, {"n": i}) for i in range(5)])
    kathikon.insert(workers.Explode, {})
    executions = [run_job(job) for job in claim_all()]
    offender = next(e for e in executions if e.kind == "failed")
    offender.ack.delay = 1e12  # past what a datetime holds: refused for good, on every database
    acker = Acker(max_backoff=0.05).start()
    for execution in executions:
        acker.add(execution)
    assert acker.flush(10)
    assert acker.stop(5)
    assert storage.count_by_state()["completed"] == 5
    assert acker.unstorable == 1 and acker.written == 6
    job = kathikon.fetch(offender.job.id)
    assert job.state == "retryable"
    assert job.errors[-1]["kind"] == "kathikon.UnstorableOutcome"
    assert "OverflowError" in job.errors[-1]["message"]
    assert job.available_at < kathikon.fetch(offender.job.id).inserted_at + dt.timedelta(days=1)


def test_acker_completes_a_job_whose_result_the_database_refuses(transactional_db,
                                                                concurrent_db, caplog):
    """The work is done: completed once more, the result replaced by the marker (issue 26)."""
    kathikon.insert_many([(workers.Succeed, {"n": i}) for i in range(3)])
    executions = [run_job(job) for job in claim_all()]
    # Built past the checks: jsonb refuses \u0000, MariaDB's JSON_VALID 32 levels of nesting.
    refused = {"s": "a\x00b"} if connection.vendor == "postgresql" else nested(40)
    executions[1].ack.result = refused
    acker = Acker(max_backoff=0.05).start()
    for execution in executions:
        acker.add(execution)
    assert acker.stop(10)
    states = {e.job.id: kathikon.fetch(e.job.id) for e in executions}
    assert [states[e.job.id].state for e in executions] == ["completed"] * 3
    job = states[executions[1].job.id]
    assert job.errors == [] and job.attempts == 1
    type_path = "builtins.dict" if connection.vendor == "postgresql" else "builtins.list"
    assert job.result == {UNSTORED: {"reason": "refused", "type": type_path, "message": ANY}}
    assert job.result[UNSTORED]["message"].startswith("the database refused the result (")
    assert acker.unstorable == 1 and acker.written == 3
    (logged,) = [r.getMessage() for r in caplog.records if job.id.hex in r.getMessage()]
    assert "recorded as completed without its result" in logged


def test_acker_does_not_retry_a_permanent_error_forever(transactional_db, monkeypatch):
    kathikon.insert_many([(workers.Succeed, {"n": i}) for i in range(4)])
    executions = [run_job(job) for job in claim_all()]
    calls = []

    def refusing_batches(batch):
        calls.append(len(batch))
        if len(batch) > 1:
            raise ValueError("refused")  # permanent: the batch is written job by job
        return record(batch)

    monkeypatch.setattr(acker_module, "record", refusing_batches)
    acker = Acker(max_backoff=0.05).start()
    acker.add(executions[0])
    acker.flush(5)
    for execution in executions[1:]:
        acker.add(execution)
    assert acker.stop(5)
    assert calls.count(1) >= 3 and acker.failures <= 2
    assert storage.count_by_state()["completed"] == 4 and acker.unstorable == 0


# -- a retried ack that holds a batch parent ---------------------------------------------------

def test_a_retried_ack_keeps_holding_the_batch_parent(transactional_db, monkeypatch):
    parent = kathikon.insert("tests.runtime.fault_workers.BatchParent", {})
    (claimed,) = claim_all()
    execution = run_job(claimed)
    assert execution.kind == "completed" and execution.ack.hold_parent
    calls = []

    def flaky_record(batch):
        calls.append(len(batch))
        if len(calls) == 1:
            raise connection_lost()
        return record(batch)

    monkeypatch.setattr(acker_module, "record", flaky_record)
    acker = Acker(max_backoff=0.05).start()
    acker.add(execution)
    assert acker.stop(10)
    assert len(calls) == 2 and acker.written == 1
    job = kathikon.fetch(parent.id)
    assert job.state == "running" and job.meta.get(AWAITING)  # its batch is still open
    assert job.result == {"batch": execution.job.result["batch"]}
    batch = Batch.close(job.result["batch"])
    assert kathikon.fetch(parent.id).state == "completed"
    assert batch.status in ("closed", "completed")
