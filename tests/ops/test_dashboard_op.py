"""kathikon.dashboard: keyset pages, job detail, guarded actions."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import override_settings
from django.utils import timezone

import kathikon
from kathikon import dashboard
from kathikon.models import Job, Queue
from kathikon.states import JobState
from tests import workers

pytestmark = pytest.mark.django_db
NO_DESTRUCTION = {"QUEUES": {"default": {"concurrency": 10}, "emails": {"concurrency": 5}},
                  "ALLOW_DESTRUCTIVE_ACTIONS": False}


def test_list_jobs_pages_newest_first_without_gaps(job_factory):
    ids = [job_factory().id.hex for _ in range(7)]
    seen, cursor = [], None
    while True:
        page = dashboard.list_jobs(limit=3, cursor=cursor)
        seen += [job.id.hex for job in page.jobs]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == list(reversed(ids))


def test_list_jobs_is_stable_under_inserts(job_factory):
    for _ in range(4):
        job_factory()
    first = dashboard.list_jobs(limit=2)
    job_factory()  # a newer job must not shift the next page
    second = dashboard.list_jobs(limit=2, cursor=first.next_cursor)
    everything = [job.id for job in Job.objects.order_by("-id")]
    assert [job.id for job in second.jobs] == everything[3:5]


def test_list_jobs_filters(mixed_jobs):
    dead = dashboard.list_jobs(state="dead").jobs
    assert {job.id for job in dead} == {mixed_jobs["dead"].id, mixed_jobs["emails"].id}
    assert [job.id for job in dashboard.list_jobs(queue="emails").jobs] == [
        mixed_jobs["emails"].id]
    explode = dashboard.list_jobs(worker="tests.workers.Explode", state="retryable").jobs
    assert [job.id for job in explode] == [mixed_jobs["retryable"].id]


def test_list_jobs_by_queue_and_worker_include_completed_and_running_jobs(mixed_jobs):
    # On PostgreSQL these filters reach completed and executing jobs through their own
    # indexes (storage.reports.matching); every job must still be found.
    succeed = {name for name in ("available", "scheduled", "running", "completed",
                                 "completed_old", "cancelled")}
    jobs = dashboard.list_jobs(worker="tests.workers.Succeed").jobs
    assert {job.id for job in jobs} == {mixed_jobs[name].id for name in succeed}
    assert [job.id for job in jobs] == sorted((job.id for job in jobs), reverse=True)
    default = dashboard.list_jobs(queue="default", limit=100).jobs
    assert {job.id for job in default} == {job.id for name, job in mixed_jobs.items()
                                           if name != "emails"}
    done = dashboard.list_jobs(queue="default", worker="tests.workers.Succeed",
                               state="completed").jobs
    assert {job.id for job in done} == {mixed_jobs["completed"].id,
                                        mixed_jobs["completed_old"].id}


def test_list_jobs_rejects_bad_input(db):
    with pytest.raises(kathikon.InvalidState, match="unknown state 'bogus'"):
        dashboard.list_jobs(state="bogus")
    with pytest.raises(kathikon.InvalidQueue):
        dashboard.list_jobs(queue="bad queue!")
    with pytest.raises(ValueError, match="bad cursor"):
        dashboard.list_jobs(cursor="xyz")
    with pytest.raises(ValueError, match="limit"):
        dashboard.list_jobs(limit=0)


def test_fetch_job_has_history_and_errors(mixed_jobs):
    job = mixed_jobs["dead"]
    kathikon.retry(job.id)
    detail = dashboard.fetch_job(job.id.hex)
    assert detail.job.id == job.id
    assert [e["message"] for e in detail.errors] == ["first", "boom 3"]
    events = [item["event"] for item in detail.history]
    assert "inserted" in events and "retried" in events and events.count("failed") == 2
    with pytest.raises(kathikon.JobNotFound):
        dashboard.fetch_job("0" * 32)


def test_job_as_dict_is_json(mixed_jobs):
    import json

    data = dashboard.job_as_dict(mixed_jobs["dead"])
    assert json.loads(json.dumps(data))["id"] == mixed_jobs["dead"].id.hex
    assert data["state"] == "dead" and data["errors"][0]["kind"] == "builtins.RuntimeError"


def test_bulk_actions_report_changed_and_failed(mixed_jobs):
    result = dashboard.cancel_jobs([mixed_jobs["available"].id, mixed_jobs["running"].id.hex,
                                    "f" * 32, "nonsense"])
    assert result.changed == [mixed_jobs["available"].id.hex]
    reasons = dict(result.failed)
    assert "cannot be cancelled now" in reasons[mixed_jobs["running"].id.hex]
    assert "no job" in reasons["f" * 32] and "no job" in reasons["nonsense"]

    retried = dashboard.retry_jobs([mixed_jobs["dead"].id, mixed_jobs["running"].id])
    assert retried.changed == [mixed_jobs["dead"].id.hex] and len(retried.failed) == 1
    assert kathikon.fetch(mixed_jobs["dead"].id).state == JobState.AVAILABLE

    rerun = dashboard.rerun_jobs([mixed_jobs["completed"].id])
    assert len(rerun.changed) == 1 and rerun.changed[0] != mixed_jobs["completed"].id.hex
    assert kathikon.fetch(rerun.changed[0]).meta["rerun_of"] == mixed_jobs["completed"].id.hex


def test_single_actions(mixed_jobs):
    assert dashboard.retry_job(mixed_jobs["dead"].id.hex).state == JobState.AVAILABLE
    assert dashboard.cancel_job(mixed_jobs["scheduled"].id).state == JobState.CANCELLED
    assert dashboard.rerun_job(mixed_jobs["cancelled"].id).state == JobState.AVAILABLE
    with pytest.raises(kathikon.JobExecuting):
        dashboard.cancel_job(mixed_jobs["running"].id)


def test_delete_jobs_refuses_executing(mixed_jobs):
    kathikon.retry(mixed_jobs["completed"].id)  # leaves an event row behind
    result = dashboard.delete_jobs([mixed_jobs["completed"].id, mixed_jobs["running"].id,
                                    "a" * 32])
    assert result.changed == [mixed_jobs["completed"].id.hex]
    assert dict(result.failed).keys() == {mixed_jobs["running"].id.hex, "a" * 32}
    assert not Job.objects.filter(pk=mixed_jobs["completed"].id).exists()
    from kathikon.models import JobEvent

    assert not JobEvent.objects.filter(job_id=mixed_jobs["completed"].id).exists()


def test_pause_and_resume(db):
    dashboard.pause_queue("emails")
    assert Queue.objects.get(name="emails").paused
    dashboard.resume_queue("emails")
    assert not Queue.objects.get(name="emails").paused
    Queue.objects.create(name="extra")
    assert dashboard.pause_all() == ["default", "emails", "extra"]
    assert set(Queue.objects.filter(paused=True).values_list("name", flat=True)) == {
        "default", "emails", "extra"}
    dashboard.resume_all()
    assert not Queue.objects.filter(paused=True).exists()
    with pytest.raises(kathikon.InvalidQueue):
        dashboard.pause_queue("no spaces allowed")


@override_settings(TASKS={"default": {"BACKEND": "kathikon.backends.KathikonBackend",
                                      "QUEUES": ["default", "tasks_only"]}})
def test_pause_all_covers_every_queue_a_worker_may_serve():
    from kathikon import storage

    kathikon.insert(workers.Succeed, {}, queue="jobs_only")
    storage.register_node("node-a", queues={"node_only": 2})
    found = dashboard.all_queues()
    assert found == {"default": ["settings", "TASKS"], "emails": ["settings"],
                     "jobs_only": ["jobs"], "node_only": ["worker"], "tasks_only": ["TASKS"]}
    assert dashboard.pause_all() == list(found)
    assert set(Queue.objects.filter(paused=True).values_list("name", flat=True)) == set(found)
    assert dashboard.resume_all() == list(found)
    assert not Queue.objects.filter(paused=True).exists()


def test_resume_all_creates_no_row_for_a_queue_that_has_none():
    kathikon.insert(workers.Succeed, {}, queue="jobs_only")
    dashboard.resume_all()
    assert not Queue.objects.exists()


def test_prune_uses_retention_or_older_than(job_factory):
    job_factory(state=JobState.COMPLETED, finished_ago=8 * 86400)
    recent = job_factory(state=JobState.DEAD, finished_ago=3600)
    pending = job_factory()
    assert dashboard.prune() == 1
    assert dashboard.prune(older_than=dt.timedelta(minutes=30), chunk=1) == 1
    assert set(Job.objects.values_list("id", flat=True)) == {pending.id}
    assert recent.id not in set(Job.objects.values_list("id", flat=True))


@override_settings(KATHIKON=NO_DESTRUCTION)
def test_destructive_actions_refused_by_setting(mixed_jobs):
    for call in (lambda: dashboard.retry_job(mixed_jobs["dead"].id),
                 lambda: dashboard.cancel_jobs([mixed_jobs["available"].id]),
                 lambda: dashboard.rerun_job(mixed_jobs["completed"].id),
                 lambda: dashboard.delete_jobs([mixed_jobs["completed"].id]),
                 lambda: dashboard.pause_queue("default"), dashboard.pause_all,
                 dashboard.resume_all, dashboard.prune):
        with pytest.raises(kathikon.ActionNotAllowed, match="ALLOW_DESTRUCTIVE_ACTIONS"):
            call()
    assert kathikon.fetch(mixed_jobs["dead"].id).state == JobState.DEAD
    assert not Queue.objects.filter(paused=True).exists()
    # Reads stay allowed, and an explicit argument overrides the setting.
    assert dashboard.list_jobs().jobs and dashboard.queue_summary()
    assert dashboard.retry_job(mixed_jobs["dead"].id, allow_destructive=True).state == "available"


def test_argument_can_refuse_even_when_setting_allows(mixed_jobs):
    assert dashboard.destructive_allowed() is True
    with pytest.raises(kathikon.ActionNotAllowed):
        dashboard.retry_job(mixed_jobs["dead"].id, allow_destructive=False)


def test_actions_fire_signals(mixed_jobs):
    from kathikon import signals

    seen = []

    def receiver(sender, **kwargs):
        seen.append(kwargs["queue"])

    signals.queue_paused.connect(receiver)
    try:
        dashboard.pause_queue("emails")
    finally:
        signals.queue_paused.disconnect(receiver)
    assert seen == ["emails"]
    assert kathikon.insert(workers.Succeed, {}).inserted_at <= timezone.now()
