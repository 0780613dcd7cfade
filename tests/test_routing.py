"""Queues on several databases (``KATHIKON["QUEUES"][name]["database"]``), in process:
each job is written to, found in and changed in its queue's database only.

Whole-process tests (a worker serving both, kill -9, one database down):
tests/runtime/test_databases.py.
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.test import override_settings
from django.urls import reverse

import kathikon
from kathikon import conf, report
from kathikon.checks import check_cron, check_settings
from kathikon.exceptions import InvalidJob
from kathikon.management.commands.kathikon_worker import split_by_database
from kathikon.models import CronSchedule, Job, Queue
from kathikon.states import JobState
from tests import workers

pytestmark = pytest.mark.django_db(databases=["default", "second"])
TWO = {"QUEUES": {"default": {"concurrency": 10}, "reports": {"database": "second"}}}


def where(job_id) -> list[str]:
    return [alias for alias in ("default", "second")
            if Job.objects.using(alias).filter(pk=job_id).exists()]


@override_settings(KATHIKON=TWO)
def test_settings_name_each_queues_database():
    assert conf.databases() == ["default", "second"]
    assert conf.queue_database("reports") == "second"
    assert conf.queue_database("default") == conf.queue_database("unlisted") == "default"


def test_a_queue_on_an_unknown_database_is_refused_by_checks():
    with override_settings(KATHIKON={"QUEUES": {"r": {"database": "nowhere"}}}):
        assert "kathikon.E008" in {m.id for m in check_settings()}
    with override_settings(KATHIKON={"QUEUES": {"r": {"database": 3}}}):
        assert "kathikon.E003" in {m.id for m in check_settings()}


@override_settings(KATHIKON=TWO)
def test_insert_writes_the_queues_database_only():
    here = kathikon.insert(workers.Succeed, {}, queue="default")
    there = kathikon.insert(workers.Succeed, {}, queue="reports")
    assert where(here.id) == ["default"]
    assert where(there.id) == ["second"]
    assert kathikon.fetch(there.id.hex).queue == "reports"  # found where it lives
    assert kathikon.status(there.id)["state"] == JobState.AVAILABLE


@override_settings(KATHIKON=TWO)
def test_insert_joins_a_transaction_on_its_queues_database():
    with pytest.raises(RuntimeError), transaction.atomic(using="second"):
        job = kathikon.insert(workers.Succeed, {}, queue="reports")
        raise RuntimeError("roll back")
    assert where(job.id) == []


@override_settings(KATHIKON=TWO)
def test_insert_many_across_databases_is_refused_whole():
    with pytest.raises(InvalidJob, match="different databases"):
        kathikon.insert_many([(workers.Succeed, {}, {"queue": "default"}),
                              (workers.Succeed, {}, {"queue": "reports"})])
    assert not Job.objects.exists() and not Job.objects.using("second").exists()
    result = kathikon.insert_many([(workers.Succeed, {"i": i}, {"queue": "reports"})
                                   for i in range(3)])
    assert result.inserted == 3 and Job.objects.using("second").count() == 3


@override_settings(KATHIKON=TWO)
def test_actions_by_id_act_where_the_job_lives():
    job = kathikon.insert(workers.Succeed, {}, queue="reports")
    cancelled = kathikon.cancel(job.id)
    assert cancelled.state == JobState.CANCELLED
    assert Job.objects.using("second").get(pk=job.id).state == JobState.CANCELLED
    kathikon.retry(job.id.hex)
    assert Job.objects.using("second").get(pk=job.id).state == JobState.AVAILABLE
    copy = kathikon.rerun(kathikon.cancel(job.id).id)
    assert where(copy.id) == ["second"]


@override_settings(KATHIKON=TWO)
def test_queue_controls_write_the_queues_database():
    kathikon.pause_queue("reports")
    assert Queue.objects.using("second").get(name="reports").paused
    assert not Queue.objects.filter(name="reports").exists()
    kathikon.resume_queue("reports")
    assert not Queue.objects.using("second").get(name="reports").paused


@override_settings(KATHIKON=TWO)
def test_batches_workflows_and_cron_refuse_queues_of_another_database():
    parent = kathikon.insert(workers.Succeed, {}, queue="default")
    with pytest.raises(InvalidJob, match="lives in the database 'second'"):
        kathikon.Batch.start(parent.id, [(workers.Succeed, {}, {"queue": "reports"})])
    wf = kathikon.Workflow("elsewhere")
    with pytest.raises(InvalidJob, match="a workflow cannot use the queue 'reports'"):
        wf.add("a", workers.Succeed, {}, queue="reports")
    with pytest.raises(InvalidJob, match="a cron schedule"):
        kathikon.schedule(workers.Succeed, {}, cron="* * * * *", queue="reports")
    assert not CronSchedule.objects.exists()
    assert not Job.objects.using("second").exists()
    assert list(Job.objects.values_list("pk", flat=True)) == [parent.id]
    with override_settings(KATHIKON={**TWO, "CRON": [
            {"cron": "* * * * *", "worker": "tests.workers.Succeed", "queue": "reports"}]}):
        assert "kathikon.E013" in {m.id for m in check_cron()}


@override_settings(KATHIKON=TWO)
def test_reports_cover_every_database():
    kathikon.insert(workers.Succeed, {}, queue="default")
    kathikon.insert_many([(workers.Succeed, {}, {"queue": "reports"})] * 2)
    summaries = {s.name: s for s in report.queue_summary()}
    assert summaries["reports"].database == "second"
    assert summaries["reports"].counts["available"] == 2
    assert summaries["default"].database == "default"
    assert summaries["default"].counts["available"] == 1
    out = StringIO()
    call_command("kathikon_ops", "summary", stdout=out, stderr=StringIO())
    table = out.getvalue()
    assert "DATABASE" in table and "second" in table
    out = StringIO()
    call_command("kathikon_ops", "jobs", "--queue", "reports", "--json", stdout=out,
                 stderr=StringIO())
    assert len(json.loads(out.getvalue())["jobs"]) == 2


@override_settings(KATHIKON=TWO)
def test_ops_retry_reaches_jobs_of_both_databases():
    here = kathikon.insert(workers.Succeed, {}, queue="default")
    there = kathikon.insert(workers.Succeed, {}, queue="reports")
    for job in (here, there):
        kathikon.cancel(job.id)
    call_command("kathikon_ops", "retry", here.id.hex, there.id.hex, stdout=StringIO(),
                 stderr=StringIO())
    assert Job.objects.get(pk=here.id).state == JobState.AVAILABLE
    assert Job.objects.using("second").get(pk=there.id).state == JobState.AVAILABLE


@override_settings(KATHIKON=TWO)
def test_admin_shows_and_acts_on_each_database(admin_client):
    there = kathikon.insert(workers.Succeed, {}, queue="reports")
    kathikon.cancel(there.id)
    overview = admin_client.get(reverse("admin:kathikon_queue_changelist")).content.decode()
    assert "reports" in overview and "second" in overview
    listing = admin_client.get(reverse("admin:kathikon_job_changelist"), {"database": "second"})
    assert listing.status_code == 200 and there.id.hex in listing.content.decode()
    home = admin_client.get(reverse("admin:kathikon_job_changelist")).content.decode()
    assert there.id.hex not in home
    page = admin_client.get(reverse("admin:kathikon_job_change", args=[there.id]))
    assert page.status_code == 200
    response = admin_client.post(
        reverse("admin:kathikon_job_changelist") + "?database=second",
        {"action": "retry_jobs", "index": "0", "_selected_action": [str(there.id)]})
    assert response.status_code == 302
    assert Job.objects.using("second").get(pk=there.id).state == JobState.AVAILABLE
    bad = admin_client.get(reverse("admin:kathikon_job_changelist"), {"database": "nowhere"})
    assert bad.status_code == 400


@override_settings(KATHIKON=TWO)
def test_worker_command_splits_queues_by_database():
    assert split_by_database(None, None) == {"default": None, "second": None}
    assert split_by_database(None, "second") == {"second": None}
    assert split_by_database({"reports": 2, "default": None}, None) == {
        "second": {"reports": 2}, "default": {"default": None}}
    with pytest.raises(CommandError, match="no database 'nowhere'"):
        split_by_database(None, "nowhere")
    with pytest.raises(CommandError, match="lives in the database 'default'"):
        split_by_database({"default": None}, "second")


@override_settings(KATHIKON=TWO)
def test_admin_queue_form_saves_to_the_queues_database(admin_client):
    url = reverse("admin:kathikon_queue_change", args=["reports"])
    assert admin_client.get(url).status_code == 200
    response = admin_client.post(url, {"name": "reports", "concurrency": "3", "limits": ""})
    assert response.status_code == 302
    assert Queue.objects.using("second").get(name="reports").concurrency == 3
    assert not Queue.objects.filter(name="reports").exists()


@override_settings(KATHIKON=TWO)
def test_an_external_runner_claims_and_reports_on_the_queues_database():
    job = kathikon.insert(workers.Succeed, {}, queue="reports")
    claimed = kathikon.claim_available("reports", node="runner-1")
    assert claimed is not None and claimed.id == job.id
    kathikon.complete(claimed, {"ok": True})
    row = Job.objects.using("second").get(pk=job.id)
    assert (row.state, row.attempted_by) == (JobState.COMPLETED, "runner-1")
    assert kathikon.claim_available("reports") is None


@override_settings(KATHIKON=TWO)
def test_testing_helpers_see_and_drain_every_database():
    from kathikon.testing import assert_enqueued, drain_queue

    kathikon.insert(workers.Succeed, {"n": 1}, queue="reports")
    kathikon.insert(workers.Succeed, {"n": 2}, queue="default")
    assert_enqueued(worker=workers.Succeed, args={"n": 1}, queue="reports")
    assert_enqueued(worker=workers.Succeed, args={"n": 1})
    assert drain_queue("reports").completed == 1
    assert Job.objects.using("second").get().state == JobState.COMPLETED
    assert drain_queue().completed == 1
    assert Job.objects.get().state == JobState.COMPLETED
