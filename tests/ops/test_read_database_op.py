"""``KATHIKON["READ_DATABASE"]``: the admin's pages and the reports read a replica; every
action reads and writes the primary.

The "replica" is a second database of the test project (``DATABASES["replica"]``) that
lags: it holds an older copy of the rows, written here by hand. A page that shows must
show the replica's copy; an action must find the primary's rows, including a job the
replica has not seen yet, and change them on the primary only.
"""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from kathikon import conf
from kathikon.checks import check_settings, read_database_problems
from kathikon.models import Job, Queue
from kathikon.states import JobState
from tests.ops.conftest import make_job

pytestmark = pytest.mark.django_db(databases=["default", "replica"])
REPLICA = {"QUEUES": {"default": {"concurrency": 10}}, "READ_DATABASE": "replica"}


def lagging_copy(job: Job, **older: Any) -> Job:
    """The replica's copy of ``job`` as it was before its latest change."""
    fields = {f.attname: getattr(job, f.attname) for f in Job._meta.concrete_fields}
    return Job.objects.using("replica").create(**{**fields, **older})


def job_queries(alias: str, captured: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if "kathikon_job" in q["sql"]]


@pytest.fixture
def lagging(db: Any) -> dict[str, Job]:
    """A dead job the replica still sees available, and a job only the primary has."""
    dead = make_job(state=JobState.DEAD, attempts=3, queue="default")
    lagging_copy(dead, state=JobState.AVAILABLE, attempts=0, completed_at=None)
    fresh = make_job(state=JobState.DEAD, attempts=3, queue="fresh")
    return {"dead": dead, "fresh": fresh}


def test_setting_defaults_to_the_primary_and_is_checked():
    assert conf.read_database() == conf.database() == "default"
    with override_settings(KATHIKON={**REPLICA, "READ_DATABASE": "nowhere"}):
        ids = {message.id for message in check_settings()}
        assert "kathikon.E008" in ids
    with override_settings(KATHIKON={**REPLICA, "READ_DATABASE": 5}):
        assert "kathikon.E008" in {message.id for message in check_settings()}


def test_a_replica_of_another_kind_is_refused_by_a_check():
    databases = {"default": {"ENGINE": "django.db.backends.postgresql"},
                 "gis": {"ENGINE": "django.contrib.gis.db.backends.postgis"},
                 "other": {"ENGINE": "django.db.backends.mysql"}}
    problems = read_database_problems({"READ_DATABASE": "other"}, databases)
    assert [p.id for p in problems] == ["kathikon.E017"]
    assert "same kind of database" in problems[0].msg
    assert not read_database_problems({"READ_DATABASE": "gis"}, databases)
    assert not read_database_problems({"READ_DATABASE": None}, databases)


@override_settings(KATHIKON=REPLICA)
def test_job_list_and_detail_read_the_replica(admin_client_op, lagging):
    with CaptureQueriesContext(connections["default"]) as primary, \
            CaptureQueriesContext(connections["replica"]) as replica:
        listing = admin_client_op.get(reverse("admin:kathikon_job_changelist"))
        detail = admin_client_op.get(reverse("admin:kathikon_job_change",
                                             args=[lagging["dead"].pk]))
    html = listing.content.decode()
    assert listing.status_code == 200
    assert lagging["dead"].id.hex in html
    assert lagging["fresh"].id.hex not in html  # not replicated yet
    assert ">available</span>" in html and ">dead</span>" not in html  # the replica's copy
    assert detail.status_code == 200 and ">available</span>" in detail.content.decode()
    assert job_queries("replica", replica)
    assert not job_queries("default", primary)  # sessions and users: the primary's, no jobs


@override_settings(KATHIKON=REPLICA)
def test_overview_counts_come_from_the_replica(admin_client_op, lagging):
    with CaptureQueriesContext(connections["default"]) as primary:
        response = admin_client_op.get(reverse("admin:kathikon_queue_changelist"))
    html = response.content.decode()
    assert response.status_code == 200
    assert "fresh" not in html  # its only job is not on the replica yet
    assert not job_queries("default", primary)


@override_settings(KATHIKON=REPLICA)
def test_actions_read_and_write_the_primary(admin_client_op, lagging):
    fresh, dead = lagging["fresh"], lagging["dead"]
    with CaptureQueriesContext(connections["replica"]) as replica:
        response = admin_client_op.post(reverse("admin:kathikon_job_changelist"), {
            "action": "retry_jobs", "index": "0",
            "_selected_action": [str(fresh.pk), str(dead.pk)]})
    assert response.status_code == 302
    assert not replica.captured_queries  # the selection and the retry: the primary's rows
    states = dict(Job.objects.filter(pk__in=[fresh.pk, dead.pk]).values_list("id", "state"))
    assert states == {fresh.pk: JobState.AVAILABLE, dead.pk: JobState.AVAILABLE}
    # the replica is never written: its copy stays as it was
    assert Job.objects.using("replica").get(pk=dead.pk).attempts == 0
    assert not Job.objects.using("replica").filter(pk=fresh.pk).exists()


@override_settings(KATHIKON=REPLICA)
def test_job_page_button_acts_on_the_primary(admin_client_op, lagging):
    fresh = lagging["fresh"]  # the replica has no such job: the page would 404, the action not
    url = reverse("admin:kathikon_job_action", args=[fresh.pk, "retry_jobs"])
    response = admin_client_op.post(url)
    assert response.status_code == 302
    assert Job.objects.get(pk=fresh.pk).state == JobState.AVAILABLE


@override_settings(KATHIKON=REPLICA)
def test_pause_all_covers_queues_only_the_primary_knows(admin_client_op, lagging):
    response = admin_client_op.post(reverse("admin:kathikon_queue_pause_all"))
    assert response.status_code in (200, 302)
    assert Queue.objects.get(name="fresh").paused
    assert not Queue.objects.using("replica").filter(paused=True).exists()


@override_settings(KATHIKON=REPLICA)
def test_ops_reports_read_the_replica(lagging):
    out = StringIO()
    call_command("kathikon_ops", "jobs", "--json", stdout=out, stderr=StringIO())
    listed = {job["id"]: job["state"] for job in json.loads(out.getvalue())["jobs"]}
    assert listed == {lagging["dead"].id.hex: JobState.AVAILABLE}
    out = StringIO()
    call_command("kathikon_ops", "summary", "--json", stdout=out, stderr=StringIO())
    assert "fresh" not in out.getvalue()
    # a command that changes something goes to the primary
    call_command("kathikon_ops", "retry", lagging["fresh"].id.hex, stdout=StringIO(),
                 stderr=StringIO())
    assert Job.objects.get(pk=lagging["fresh"].pk).state == JobState.AVAILABLE
