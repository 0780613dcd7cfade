"""The insert, claim and ack are prepared statements on a connection straight to PostgreSQL,
and plain ones behind a pooler, with the setting off, or after a column changed type."""

from __future__ import annotations

import re
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections, transaction
from django.test import override_settings

import kathikon
from kathikon.storage import acks, claims, prepared
from tests import workers
from tests.connections import another_session, fresh_connection
from tests.tcp_proxy import Proxy


def _kind(sql: str) -> str:
    """Which of the job path's statements ``sql`` is."""
    if "INSERT INTO kathikon_job" in sql:
        return "insert"
    if "FOR UPDATE SKIP LOCKED" in sql:
        return "claim"
    if "SET state = 'completed'" in sql:
        return "ack"
    return sql


@pytest.fixture
def fresh(postgres_only) -> Iterator[Any]:
    with fresh_connection() as wrapper:  # nothing prepared yet
        yield wrapper


def _job_path(times: int = 3) -> None:
    """Each hot statement ``times`` times: insert, claim, ack."""
    for i in range(times):
        kathikon.insert(workers.Succeed, {"i": i}, queue="default")
        jobs = claims.claim_jobs("default", 5, "node-a")
        assert jobs
        assert acks.ack_jobs([acks.Ack(job, "completed") for job in jobs]) == {
            job.id for job in jobs}


def _prepared(wrapper: Any) -> list[tuple[str, int, str]]:
    """The statements prepared in ``wrapper``'s session: text, how often each ran planned,
    and name."""
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT statement, generic_plans + custom_plans, name "
                       "FROM pg_prepared_statements")
        return [(text.strip(), runs, name) for text, runs, name in cursor.fetchall()]


@pytest.mark.django_db(transaction=True)
def test_the_job_path_runs_prepared_on_a_direct_connection(fresh):
    _job_path()
    # prepared once each, run three times
    assert {_kind(text): runs for text, runs, _ in _prepared(fresh)} == {
        "insert": 3, "claim": 3, "ack": 3}
    assert prepared.prepares(fresh)


@pytest.mark.django_db(transaction=True)
def test_the_applications_own_statements_stay_unprepared(fresh):
    from psycopg import Cursor

    _job_path(1)
    raw = fresh.connection
    for _ in range(10):  # psycopg's own threshold is 5: Django's None must still hold
        with Cursor(raw) as cursor:
            cursor.execute("SELECT %s::int + 41", [1])
    assert not [text for text, _, _ in _prepared(fresh) if "41" in text]


@pytest.mark.django_db(transaction=True)
def test_while_django_records_queries_they_run_plain_and_are_logged_with_their_values(fresh):
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(fresh) as captured:
        _job_path(1)
    logged = [q["sql"] for q in captured.captured_queries]
    assert [_kind(sql) for sql in logged] == ["insert", "claim", "ack"]
    assert "'default'" in logged[0] and "'node-a'" in logged[1]  # values, not $1
    assert _prepared(fresh) == []


@pytest.mark.django_db(transaction=True)
def test_nothing_is_prepared_with_the_setting_off(postgres_only):
    off = {"QUEUES": {"default": {}}, "PREPARED_STATEMENTS": False}
    with override_settings(KATHIKON=off), fresh_connection() as wrapper:
        _job_path()
        assert _prepared(wrapper) == []


class _Pooler(Proxy):
    """A relay that, like PgBouncer, gives its clients a backend pid of its own (message
    ``K``, BackendKeyData, sent once at the start); every other byte passes unchanged."""

    clients = 0

    def relay_server(self, upstream: socket.socket, client: socket.socket) -> None:
        self.clients += 1
        buffer = b""
        try:
            while True:
                while len(buffer) < 5 or len(buffer) < 1 + struct.unpack("!i", buffer[1:5])[0]:
                    data = upstream.recv(65536)
                    if not data:
                        return
                    buffer += data
                kind, size = buffer[:1], struct.unpack("!i", buffer[1:5])[0]
                message, buffer = buffer[:1 + size], buffer[1 + size:]
                if kind == b"K":
                    pid = struct.unpack("!i", message[5:9])[0]
                    message = message[:5] + struct.pack("!i", pid ^ 0x5A5A5A) + message[9:]
                client.sendall(message)
                if kind == b"K":
                    client.sendall(buffer)
                    break
        except OSError:
            return
        self.pump(upstream, client)


@pytest.mark.django_db(transaction=True)
def test_behind_a_pooler_nothing_is_prepared_and_the_job_path_works(postgres_only):
    default = connections["default"].settings_dict
    pooler = _Pooler((default["HOST"] or "127.0.0.1", int(default["PORT"] or 5432))).start()
    try:
        options = {"sslmode": "disable", "gssencmode": "disable"}  # plain messages to relay
        with fresh_connection(HOST="127.0.0.1", PORT=str(pooler.port),
                              OPTIONS=options) as wrapper:
            _job_path()
            assert pooler.clients == 1
            assert not prepared.prepares(wrapper)
            assert _prepared(wrapper) == []
    finally:
        pooler.stop()


def _alter_from_another_session(sql: str) -> None:
    """What a deploy's migration does while workers and web processes keep their sessions."""
    with another_session() as other:
        other.execute(sql)


@pytest.mark.django_db(transaction=True)
def test_a_column_changing_type_under_the_prepared_statements_changes_nothing(fresh):
    _job_path(1)
    _alter_from_another_session("ALTER TABLE kathikon_job ALTER COLUMN attempted_by TYPE text")
    try:
        kathikon.insert(workers.Succeed, {}, queue="default")
        [job] = claims.claim_jobs("default", 5, "node-a")
        assert job.attempted_by == "node-a"
        with transaction.atomic():
            kathikon.insert(workers.Succeed, {}, queue="default")
            assert len(claims.claim_jobs("default", 5, "node-a")) == 1
        # The failed claim dropped the session's plans; made anew since: the claim's retry
        # and the claim and insert in the transaction.
        runs = {_kind(text): runs for text, runs, _ in _prepared(fresh)}
        assert runs == {"claim": 2, "insert": 1}
    finally:
        _alter_from_another_session("ALTER TABLE kathikon_job ALTER COLUMN attempted_by "
                                    "TYPE varchar(255)")


@pytest.mark.django_db(transaction=True)
def test_the_claims_generic_plan_fetches_its_jobs_by_primary_key(fresh):
    """PostgreSQL switches a prepared statement to a generic plan, which guesses that
    ``LIMIT $n`` keeps 10% of the queue: the claim must not then scan the table."""
    kathikon.insert_many([(workers.Succeed, {}, {"queue": "default"})] * 20_000)
    with fresh.cursor() as cursor:
        cursor.execute("ANALYZE kathikon_job")
    assert len(claims.claim_jobs("default", 5, "node-a")) == 5
    [(text, _, name)] = [row for row in _prepared(fresh) if _kind(row[0]) == "claim"]
    values = {"state": "'running'", "attempted_by": "'node-a'", "queue": "'default'", "LIMIT": "5"}
    found = dict(re.findall(r"(state|attempted_by|queue|LIMIT) =? ?\$(\d+)", text))
    arguments = ", ".join(values[found_by] for found_by, _ in sorted(
        found.items(), key=lambda item: int(item[1])))
    with fresh.cursor() as cursor:
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        try:
            cursor.execute(f"EXPLAIN EXECUTE {name}({arguments})")
            plan = "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("RESET plan_cache_mode")
    assert "Seq Scan" not in plan, plan
    assert "kathikon_job_pkey" in plan, plan
