"""kathikon.report: queue and failure summaries, throughput — a fixed number of queries."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from django.utils import timezone

import kathikon
from kathikon import report
from kathikon.models import Queue
from kathikon.states import JobState
from tests import workers

pytestmark = pytest.mark.django_db


def test_queue_summary_counts_every_state(mixed_jobs, django_assert_max_num_queries):
    with django_assert_max_num_queries(4):  # rows, live nodes, counts, activity
        summaries = {s.name: s for s in report.queue_summary()}
    default = summaries["default"]
    assert default.counts[JobState.AVAILABLE] == 1
    assert default.counts[JobState.SCHEDULED] == 1
    assert default.counts[JobState.RUNNING] == 1
    assert default.counts[JobState.COMPLETED] == 2
    assert default.counts[JobState.DEAD] == 1
    assert default.counts[JobState.RETRYABLE] == 1
    assert default.counts[JobState.CANCELLED] == 1
    assert default.total == 8
    assert default.concurrency == 10 and not default.paused
    assert 280 <= default.oldest_available_age <= 400
    assert default.completed_last_minute == 1 and default.completed_last_hour == 1
    assert default.failed_last_minute == 1 and default.failed_last_hour == 1
    emails = summaries["emails"]
    assert emails.counts[JobState.DEAD] == 1 and emails.concurrency == 5
    assert emails.failed_last_minute == 0 and emails.failed_last_hour == 1
    assert emails.oldest_available_age is None


def test_queue_summary_merges_rows_settings_and_jobs(job_factory):
    Queue.objects.create(name="emails", paused=True, concurrency=2)
    Queue.objects.create(name="reports", paused=False)
    job_factory(queue="adhoc")
    summaries = {s.name: s for s in report.queue_summary()}
    assert set(summaries) == {"default", "emails", "reports", "adhoc"}
    assert summaries["emails"].paused and summaries["emails"].concurrency == 2
    assert summaries["adhoc"].counts[JobState.AVAILABLE] == 1
    assert not summaries["adhoc"].configured and summaries["default"].configured
    assert summaries["default"].total == 0
    assert summaries["default"].as_dict()["total"] == 0


def test_queue_summary_query_count_does_not_grow_with_queues(job_factory,
                                                             django_assert_max_num_queries):
    for index in range(12):
        job_factory(queue=f"q{index}")
        Queue.objects.create(name=f"row{index}")
    with django_assert_max_num_queries(4):  # rows, live nodes, counts, activity
        assert len(report.queue_summary()) == 2 + 12 + 12


def test_failure_summary_groups_by_worker_and_last_error_kind(mixed_jobs,
                                                              django_assert_num_queries):
    with django_assert_num_queries(1):
        failures = report.failure_summary()
    by_key = {(f.worker, f.kind): f for f in failures}
    dead = by_key[("tests.workers.Explode", "builtins.RuntimeError")]
    assert dead.count == 1 and dead.sample_message == "boom 3"
    assert dead.last_seen is not None and dead.last_seen.tzinfo is not None
    retry = by_key[("tests.workers.Explode", "builtins.ValueError")]
    assert retry.count == 1 and retry.sample_message == "bad value"
    assert ("tests.workers.Emails", "smtplib.SMTPError") in by_key
    assert failures[0].as_dict()["count"] == 1


def test_failure_summary_window_excludes_old_failures(mixed_jobs):
    kinds = {f.kind for f in report.failure_summary(window=120)}
    assert "smtplib.SMTPError" not in kinds  # died 10 minutes ago
    assert "builtins.RuntimeError" in kinds


def test_failure_summary_counts_many_jobs(job_factory):
    from tests.ops.conftest import error

    for index in range(5):
        job_factory(state=JobState.DEAD, errors=[error(message=f"m{index}")])
    job_factory(state=JobState.DEAD, errors=[])
    counts = {f.kind: f.count for f in report.failure_summary()}
    assert counts == {"builtins.RuntimeError": 5, "(no error recorded)": 1}


def test_throughput_has_every_minute(mixed_jobs):
    points = report.throughput(minutes=60)
    assert len(points) == 60
    assert points[-1].minute <= timezone.now() < points[-1].minute + dt.timedelta(minutes=1)
    assert sum(p.completed for p in points) == 1
    assert sum(p.failed for p in points) == 2  # dead 30 s and 10 min ago
    assert all(b.minute - a.minute == dt.timedelta(minutes=1)
               for a, b in itertools.pairwise(points))


def test_throughput_by_queue(mixed_jobs):
    assert sum(p.failed for p in report.throughput(queue="emails")) == 1
    assert sum(p.completed for p in report.throughput(queue="emails")) == 0


def test_reports_of_an_empty_database(db):
    assert [s.name for s in report.queue_summary()] == ["default", "emails"]
    assert report.failure_summary() == []
    assert kathikon.all() == []


def test_capped_counts_are_exact_below_the_cap_and_estimates_above(job_factory, vendor,
                                                                   django_assert_max_num_queries):
    kathikon.insert_many([(workers.Succeed, {"i": i}) for i in range(30)])
    kathikon.insert_many([(workers.Succeed, {"i": i}, {"queue": "emails"}) for i in range(3)])
    # rows, live nodes, counts (with SET LOCAL jit = off in a savepoint), one estimate, activity
    with django_assert_max_num_queries(8):
        summaries = {s.name: s for s in report.queue_summary(count_cap=10)}
    exact = {s.name: s for s in report.queue_summary()}
    assert exact["default"].counts[JobState.AVAILABLE] == 30
    emails = summaries["emails"]
    assert emails.counts[JobState.AVAILABLE] == 3 and emails.estimated == ()
    assert emails.count_text(JobState.AVAILABLE) == "3"
    default = summaries["default"]
    if vendor == "postgresql":  # capped at 10, then the planner's estimate (at least 11)
        assert default.estimated == (JobState.AVAILABLE,)
        assert default.counts[JobState.AVAILABLE] >= 11
        assert default.count_text(JobState.AVAILABLE).startswith("≈")
    else:  # exact everywhere else
        assert default.estimated == ()
        assert default.counts[JobState.AVAILABLE] == 30
    assert default.counts[JobState.COMPLETED] == 0 and default.count_text("completed") == "0"


def test_capped_counts_find_queues_with_only_completed_or_executing_jobs(job_factory):
    # On PostgreSQL the queues come from loose scans of three partial indexes (resting,
    # completed, executing jobs): a queue holding only completed or running jobs is found.
    job_factory(queue="done", state=JobState.COMPLETED)
    job_factory(queue="done", state=JobState.COMPLETED)
    job_factory(queue="busy", state=JobState.RUNNING)
    job_factory(queue="busy", state=JobState.CLAIMED)
    job_factory(queue="waiting", state=JobState.RETRYABLE)
    summaries = {s.name: s for s in report.queue_summary(count_cap=10)}
    assert {"done", "busy", "waiting"} <= set(summaries)
    assert summaries["done"].counts[JobState.COMPLETED] == 2
    assert summaries["busy"].counts[JobState.RUNNING] == 1
    assert summaries["busy"].counts[JobState.CLAIMED] == 1
    assert summaries["waiting"].counts[JobState.RETRYABLE] == 1
    assert summaries["done"].total == 2 and summaries["busy"].total == 2


def test_failure_summary_with_a_scan_cap_groups_only_the_newest_failures(
        job_factory, django_assert_num_queries):
    from tests.ops.conftest import error

    for index in range(5):  # ids are time-ordered: the last ones are the newest
        job_factory(worker=workers.Explode, state=JobState.DEAD, attempts=1,
                    errors=[error(kind="builtins.KeyError" if index < 3 else "builtins.OSError",
                                  message=f"m{index}")], finished_ago=60)
    everything = {f.kind: f.count for f in report.failure_summary()}
    assert everything == {"builtins.KeyError": 3, "builtins.OSError": 2}
    with django_assert_num_queries(1):
        sampled = report.failure_summary(scan_cap=3)
    assert {f.kind: f.count for f in sampled} == {"builtins.OSError": 2, "builtins.KeyError": 1}
    assert {f.sample_message for f in sampled} == {"m4", "m2"}


def test_oldest_waiting_is_the_oldest_due_job_across_priorities(job_factory):
    now = timezone.now()
    job_factory(priority=5, available_at=now - dt.timedelta(seconds=30))
    job_factory(priority=-3, available_at=now - dt.timedelta(seconds=300))
    job_factory(priority=0, available_at=now - dt.timedelta(seconds=100))
    job_factory(state=JobState.RETRYABLE, priority=9, available_at=now + dt.timedelta(hours=1))
    job_factory(queue="emails", state=JobState.RETRYABLE, priority=2,
                available_at=now - dt.timedelta(seconds=50))
    job_factory(queue="emails", state=JobState.COMPLETED, available_at=now - dt.timedelta(days=1))
    job_factory(queue="reports", state=JobState.RETRYABLE, available_at=now + dt.timedelta(hours=1))
    summaries = {s.name: s for s in report.queue_summary(now)}
    assert 299 <= summaries["default"].oldest_available_age <= 301
    assert 49 <= summaries["emails"].oldest_available_age <= 51
    assert summaries["reports"].oldest_available_age is None


def test_timing_summary_gives_wait_and_run_percentiles_per_queue(django_assert_max_num_queries):
    """100 completions on default waiting 1..100 s and running 0.1..10 s; 2 on emails; one
    completed two hours ago and a dead job are left out."""
    from kathikon.models import Job
    from tests.ops.conftest import make_job

    def completed(due, started, done, **options):
        job = make_job(state=JobState.COMPLETED, attempts=1, **options)
        Job.objects.filter(pk=job.pk).update(available_at=due, started_at=started,
                                             completed_at=done)

    now = timezone.now()
    started = now - dt.timedelta(minutes=30)
    for i in range(1, 101):
        completed(started - dt.timedelta(seconds=i), started,
                  started + dt.timedelta(seconds=i / 10))
    for i in (1, 2):
        at = now - dt.timedelta(seconds=10)
        completed(at, at, at + dt.timedelta(seconds=i), queue="emails", worker=workers.Emails)
    old = now - dt.timedelta(hours=3)
    completed(old, old, now - dt.timedelta(hours=2))
    make_job(state=JobState.DEAD, attempts=1, started_at=now, available_at=now)
    with django_assert_max_num_queries(1):
        timings = {t.queue: t for t in report.timing_summary(now=now)}
    assert set(timings) == {"default", "emails"}
    default = timings["default"]
    assert default.jobs == 100
    assert default.wait == {"p50": 50.0, "p95": 95.0, "p99": 99.0}
    assert default.run == pytest.approx({"p50": 5.0, "p95": 9.5, "p99": 9.9})
    assert timings["emails"].run == {"p50": 1.0, "p95": 2.0, "p99": 2.0}
    sampled = {t.queue: t for t in report.timing_summary(now=now, sample=10)}
    assert sum(t.jobs for t in sampled.values()) == 10  # the newest 10 only
    assert [t.queue for t in report.timing_summary(now=now, queue="emails")] == ["emails"]
