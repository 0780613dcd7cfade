"""The partitioned job table (kathikon.storage.partitions, docs/partitioning.md).

PostgreSQL only. Each test leaves the table as it found it: the suite also runs whole
on a partitioned table (``KATHIKON_PARTITIONED=1``, one lane of the test matrix).
"""

from __future__ import annotations

import datetime as dt
import io
import json
import threading
from collections.abc import Iterator

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections

import kathikon
from kathikon import storage
from kathikon.executor import execute_job
from kathikon.models import Job
from kathikon.storage import partitions
from kathikon.storage.claims import _PG_CLAIM
from tests import workers
from tests.concurrency import run_at_once

pytestmark = pytest.mark.django_db(transaction=True)

TODAY = dt.datetime.now(dt.timezone.utc).date()


def _where(job_id: object) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM kathikon_job WHERE id = %s",
                       [job_id])
        return cursor.fetchone()[0]


def _plain() -> None:
    if partitions.is_partitioned():
        partitions.disable(keep_history=False)


def test_other_databases_keep_the_plain_table(vendor: str) -> None:
    if vendor == "postgresql":
        pytest.skip("MariaDB and SQLite only")
    assert not partitions.partitioned() and partitions.live_only("j") == ""
    with pytest.raises(partitions.PartitioningError, match="needs PostgreSQL"):
        partitions.enable()
    with pytest.raises(CommandError, match="needs PostgreSQL"):
        call_command("kathikon_partition", "status")


@pytest.fixture
def plain(postgres_only: None) -> Iterator[None]:
    """A plain job table for the test; put back as the suite had it afterwards."""
    was = partitions.is_partitioned()
    _plain()
    yield
    _plain()
    if was:
        partitions.enable()


@pytest.fixture
def partitioned(plain: None) -> Iterator[None]:
    partitions.enable()
    yield


def run_one(queue: str = "default") -> Job:
    (job,) = storage.claim_jobs(queue, 1, "test-node")
    execute_job(job)
    return kathikon.fetch(job.id)


def test_enable_keeps_every_job_and_moves_only_the_live_ones(plain: None) -> None:
    done = [kathikon.insert(workers.Succeed, {"n": n}) for n in range(3)]
    for _ in done:
        run_one()
    dead = kathikon.insert(workers.Explode, {}, max_attempts=1)
    run_one()
    held_key = kathikon.insert(workers.Succeed, {"u": 1},
                               unique=kathikon.Unique(states=kathikon.unique.ALL_BUT_FAILED))
    assert run_one().state == "completed"  # and still holds its key
    waiting = [kathikon.insert(workers.Succeed, {"w": n}) for n in range(4)]
    before = Job.objects.count()

    enabled = partitions.enable(ahead=2)

    assert partitions.is_partitioned()
    assert enabled.live_rows == len(waiting) + 1 and enabled.legacy_rows == 4
    kinds = {p.name: p.kind for p in partitions.partitions()}
    assert kinds[partitions.LIVE] == "live" and kinds[partitions.LEGACY] == "legacy"
    assert kinds[partitions.DEFAULT] == "default"
    assert {partitions.day_name(TODAY + dt.timedelta(days=d)) for d in (1, 2)} <= set(kinds)
    assert Job.objects.count() == before
    assert {_where(job.id) for job in waiting} == {partitions.LIVE}
    assert _where(held_key.id) == partitions.LIVE  # its key is guarded by the live index
    assert {_where(job.id) for job in done} | {_where(dead.id)} == {partitions.LEGACY}
    assert kathikon.insert(workers.Succeed, {"u": 1},
                           unique=kathikon.Unique(states=kathikon.unique.ALL_BUT_FAILED)).conflict


def test_an_ack_moves_the_job_to_its_day_and_a_retry_brings_it_back(partitioned: None) -> None:
    assert partitions.LEGACY not in {p.name for p in partitions.partitions()}  # empty: dropped
    job = kathikon.insert(workers.Succeed, {})
    assert _where(job.id) == partitions.LIVE
    assert run_one().state == "completed"
    assert _where(job.id) == partitions.day_name(TODAY)
    failed = kathikon.insert(workers.Explode, {}, max_attempts=1)
    assert run_one().state == "dead"
    assert _where(failed.id) == partitions.day_name(TODAY)
    assert kathikon.retry(failed.id).state == "available"
    assert _where(failed.id) == partitions.LIVE
    assert run_one().state == "dead"
    assert Job.objects.filter(state="dead").count() == 1


def test_unique_keys_hold_across_the_partitions(partitioned: None) -> None:
    first = kathikon.insert(workers.Succeed, {"k": 1}, unique=True)
    assert kathikon.insert(workers.Succeed, {"k": 1}, unique=True).conflict
    kathikon.insert_many([(workers.Succeed, {"k": n}, {"unique": True}) for n in (1, 2, 3)])
    assert Job.objects.filter(args__k=1).count() == 1
    run_one()
    assert _where(first.id) == partitions.day_name(TODAY)  # the key freed on completion
    assert not kathikon.insert(workers.Succeed, {"k": 1}, unique=True).conflict


def test_statements_on_live_jobs_read_only_the_live_partition(partitioned: None) -> None:
    sql = partitions.on_live(_PG_CLAIM.format(now="statement_timestamp()", key="j.unique_key"))
    params = {"queue": "default", "limit": 10, "node": "n", "into": "running", "now": None}
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert partitions.LIVE in plan
    assert partitions.day_name(TODAY) not in plan and partitions.DEFAULT not in plan


def test_maintain_from_two_threads_creates_each_day_once(partitioned: None) -> None:
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=10)
    results = run_at_once(lambda _: partitions.maintain(
        now=later, retention=dt.timedelta(days=30), ahead=3), threads=2)
    created = sorted(name for result in results if result for name in result.created)
    wanted = [partitions.day_name(later.date() + dt.timedelta(days=d)) for d in range(4)]
    assert created == wanted  # each once, by one thread or the other
    names = {p.name for p in partitions.partitions()}
    assert set(wanted) <= names


def test_rows_of_a_day_without_a_partition_wait_in_the_default_one(partitioned: None) -> None:
    job = kathikon.insert(workers.Succeed, {})
    # The day partition is gone (no pruner ran for days): the ack still lands.
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {partitions.day_name(TODAY)}")
    assert run_one().state == "completed"
    assert _where(job.id) == partitions.DEFAULT
    done = partitions.maintain(now=dt.datetime.now(dt.timezone.utc),
                               retention=dt.timedelta(days=7))
    assert partitions.day_name(TODAY) in done.created
    assert _where(job.id) == partitions.day_name(TODAY)


def test_expired_days_are_dropped_whole_with_their_events(partitioned: None) -> None:
    job = kathikon.insert(workers.Succeed, {})
    run_one()
    kathikon.rerun(job.id)  # an event on the finished job
    keep = kathikon.insert(workers.Succeed, {}, unique=kathikon.Unique(
        states=kathikon.unique.ALL_BUT_FAILED))
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=9)
    while storage.claim_jobs("default", 10, "n"):
        pass  # nothing else runs: the rerun copy and `keep` are claimed and left running
    done = partitions.maintain(now=later, retention=dt.timedelta(days=7))
    assert partitions.day_name(TODAY) in done.dropped
    assert not Job.objects.filter(id=job.id).exists()
    assert not storage.events_for(job.id)
    assert Job.objects.filter(id=keep.id).exists()


def test_the_pruner_leaves_day_partitions_to_be_dropped(partitioned: None) -> None:
    job = kathikon.insert(workers.Succeed, {})
    run_one()
    soon = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=5)
    assert storage.prune_jobs(soon, whole_days=True) == 0
    assert Job.objects.filter(id=job.id).exists()
    assert storage.prune_jobs(soon) == 1  # kathikon_ops prune --older-than: row by row


def test_disable_puts_the_plain_table_back_with_its_history(partitioned: None) -> None:
    jobs = [kathikon.insert(workers.Succeed, {"n": n}) for n in range(3)]
    run_one()
    run_one()
    before = set(Job.objects.values_list("id", "state"))
    out = io.StringIO()
    call_command("kathikon_partition", "disable", stdout=out)
    assert "2 finished jobs copied back" in out.getvalue()
    assert not partitions.is_partitioned()
    assert set(Job.objects.values_list("id", "state")) == before
    assert _where(jobs[0].id) == "kathikon_job"
    assert kathikon.insert(workers.Succeed, {"k": 1}, unique=True)
    assert kathikon.insert(workers.Succeed, {"k": 1}, unique=True).conflict
    partitions.enable()  # and forth again
    assert partitions.is_partitioned()
    assert Job.objects.count() == len(before) + 1


def test_an_index_a_migration_added_while_partitioned_keeps_its_name_after_disable(
        partitioned: None) -> None:
    """A migration's AddIndex on the partitioned table names the live partition's copy
    after the partition; the way back gives it the name the migrations know, so a later
    RemoveIndex finds it."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE INDEX kathikon_job_migrated ON kathikon_job (priority, id)")
    call_command("kathikon_partition", "disable", stdout=io.StringIO())
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'kathikon_job'")
        names = {name for (name,) in cursor.fetchall()}
        assert "kathikon_job_migrated" in names
        assert not any(name.startswith(partitions.LIVE) for name in names), names
        cursor.execute("DROP INDEX kathikon_job_migrated")  # what RemoveIndex runs


def test_the_command_reports_the_partitions(partitioned: None) -> None:
    out = io.StringIO()
    call_command("kathikon_partition", "status", "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert report["partitioned"]
    assert {p["kind"] for p in report["partitions"]} >= {"live", "day", "default"}
    out = io.StringIO()
    call_command("kathikon_partition", "status", stdout=out)
    assert partitions.LIVE in out.getvalue() and "ROWS (EST.)" in out.getvalue()
    with pytest.raises(CommandError, match="partitioned already"):
        call_command("kathikon_partition", "enable", stdout=io.StringIO())


def test_a_connection_that_read_the_plain_layout_heals(plain: None) -> None:
    kathikon.insert(workers.Succeed, {"k": 0}, unique=True)  # reads and keeps "plain"
    assert not partitions.partitioned()
    elsewhere = threading.Thread(target=_enable_and_close)  # another connection
    elsewhere.start()
    elsewhere.join()
    assert not partitions.partitioned()  # what this connection read before
    assert not kathikon.insert(workers.Succeed, {"k": 1}, unique=True).conflict
    assert kathikon.insert(workers.Succeed, {"k": 1}, unique=True).conflict
    assert partitions.partitioned()


def _enable_and_close() -> None:
    try:
        partitions.enable()
    finally:
        connections.close_all()
