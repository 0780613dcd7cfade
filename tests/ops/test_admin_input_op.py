"""The admin against hostile input and half-permitted users: a 400, a 403 or an empty list,
never a 500, and nothing changed (issue 26, items 5 and 6)."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

import kathikon
from kathikon import dashboard
from kathikon.models import CronSchedule, Job, Queue
from kathikon.states import JobState
from tests import workers
from tests.ops.conftest import staff_user

pytestmark = pytest.mark.django_db

LISTS = {model: f"/admin/kathikon/{model}/"
         for model in ("job", "queue", "batch", "cronschedule", "node")}
NUL, SURROGATE = "%00", "%ED%A0%80"  # a lone surrogate's UTF-8 bytes, as a browser sends them


def listed(response) -> set[str]:
    """The job ids shown in a job list."""
    return set(re.findall(r'class="kathikon-id">([0-9a-f]{32})<', response.content.decode()))


def client_with(*codenames: str) -> Client:
    """A client logged in as a staff user holding just these Kathikon permissions."""
    name = "+".join(codenames)
    staff_user(name, *codenames)
    client = Client()
    client.login(username=name, password="pw")
    return client


@pytest.fixture
def schedule(db) -> CronSchedule:
    now = timezone.now()
    return CronSchedule.objects.create(worker="tests.workers.Succeed", expression="0 9 * * *",
                                       inserted_at=now, updated_at=now, next_fire_at=now)


# -- item 5: a NUL byte, a lone surrogate, long values, malformed ids and dates ----------------

@pytest.mark.parametrize("url", [
    *(f"{LISTS['job']}?{name}={NUL}" for name in (
        "state", "queue", "worker", "q", "args__contains", "inserted_at__range__gte",
        "completed_at__range__lte", "p", "o")),
    f"{LISTS['job']}?state=dead&queue=default{NUL}", f"{LISTS['job']}?{NUL}=1",
    f"{LISTS['queue']}?name=a{NUL}", f"{LISTS['batch']}?status__exact={NUL}",
    f"{LISTS['cronschedule']}?paused__exact={NUL}", f"{LISTS['cronschedule']}?q={NUL}",
    f"{LISTS['node']}?status__exact={NUL}",
])
def test_a_nul_byte_in_a_list_answers_400(admin_client_op, mixed_jobs, url):
    assert admin_client_op.get(url).status_code == 400


@pytest.mark.parametrize("model", ["job", "queue", "batch", "cronschedule", "node"])
@pytest.mark.parametrize("page", ["change", "delete", "history"])
def test_a_nul_byte_in_an_object_id_answers_400(admin_client_op, mixed_jobs, model, page):
    assert admin_client_op.get(f"{LISTS[model]}a{NUL}/{page}/").status_code == 400
    assert admin_client_op.post(f"{LISTS[model]}a{NUL}/{page}/",
                                {"post": "yes", "concurrency": "3"}).status_code == 400
    assert not Queue.objects.exists() and Job.objects.count() == len(mixed_jobs)


def test_a_nul_byte_in_a_job_button_answers_400_and_changes_nothing(admin_client_op, mixed_jobs):
    dead = mixed_jobs["dead"]
    for url in (f"{LISTS['job']}{dead.id.hex}{NUL}/act/retry_jobs/",
                f"{LISTS['job']}{dead.id.hex}/act/retry_jobs{NUL}/"):
        assert admin_client_op.post(url).status_code == 400
    response = admin_client_op.post(reverse("admin:kathikon_job_action",
                                            args=[dead.id.hex, "retry_jobs"]), {"x": "\x00"})
    assert response.status_code == 400
    assert Job.objects.get(pk=dead.pk).state == JobState.DEAD


@pytest.mark.parametrize("value", [SURROGATE, "x" * 5000, "%25_", "dead'--"])
@pytest.mark.parametrize("name", ["state", "queue", "worker", "q"])
def test_odd_filter_values_list_no_job(admin_client_op, mixed_jobs, name, value):
    response = admin_client_op.get(f"{LISTS['job']}?{name}={value}")
    assert response.status_code == 200 and listed(response) == set()
    assert "0 jobs" in response.content.decode()


@pytest.mark.parametrize("url", [
    f"{LISTS['job']}?args__contains={NUL}",  # the issue's: a 500 on PostgreSQL
    f"{LISTS['job']}?args__contains=x",  # a 500 on SQLite, whatever the value
    f"{LISTS['job']}?errors__contains=x", f"{LISTS['job']}?args__has_key=x",
    f"{LISTS['job']}?worker__regex=(", f"{LISTS['job']}?id=zz", f"{LISTS['job']}?state__in=dead",
    f"{LISTS['job']}?priority__gt=1", f"{LISTS['job']}?inserted_at__year=2020",
    f"{LISTS['queue']}?name=default", f"{LISTS['queue']}?paused=1",
    f"{LISTS['batch']}?id=zz", f"{LISTS['cronschedule']}?name__regex=(",
    f"{LISTS['node']}?pid__gt=x",
])
def test_a_lookup_that_is_not_one_of_the_lists_filters_answers_400(admin_client_op, mixed_jobs,
                                                                    url):
    assert admin_client_op.get(url).status_code == 400


def test_a_filter_value_django_cannot_read_answers_400(admin_client_op, mixed_jobs, schedule,
                                                       settings):
    # Django redirects these to "?e=1", a page that blames the database installation.
    assert admin_client_op.get(f"{LISTS['cronschedule']}?paused__exact=maybe").status_code == 400
    kathikon.insert_many([(workers.Succeed, {})] * 50)  # 59 jobs: a second page, no third
    assert admin_client_op.get(LISTS["job"], {"p": "2"}).status_code == 200
    assert admin_client_op.get(LISTS["job"], {"p": "3"}).status_code == 400
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "rangefilter"]
    assert admin_client_op.get(f"{LISTS['job']}?inserted_at__gte=someday").status_code == 400


def test_a_range_date_that_is_not_one_lists_no_job(admin_client_op, mixed_jobs):
    for name in ("inserted_at__range__gte", "completed_at__range__lte"):
        response = admin_client_op.get(LISTS["job"], {name: "2020-13-45"})
        assert response.status_code == 200 and listed(response) == set()  # not every job
        assert "Enter a valid date." in response.content.decode()


@pytest.mark.parametrize("zone, name, day", [
    ("Asia/Tokyo", "inserted_at__range__gte", "0001-01-01"),  # before UTC's first day
    ("America/New_York", "inserted_at__range__lte", "9999-12-31"),  # after UTC's last day
    ("America/New_York", "completed_at__range__lte", "9999-12-31"),
])
def test_the_calendars_first_and_last_days_in_any_time_zone(admin_client_op, mixed_jobs, zone,
                                                            name, day):
    everyone = {job.id.hex for job in Job.objects.all() if name[0] == "i" or job.completed_at}
    with timezone.override(zone):
        response = admin_client_op.get(LISTS["job"], {name: day})
    assert response.status_code == 200 and listed(response) == everyone


def test_the_calendars_ends_without_rangefilter(admin_client_op, mixed_jobs, settings):
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "rangefilter"]
    for bound in ({"inserted_at__gte": "0001-01-01 00:00:00+09:00"},
                  {"inserted_at__lt": "9999-12-31 23:59:59-05:00"}):
        response = admin_client_op.get(LISTS["job"], bound)
        assert response.status_code == 200 and len(listed(response)) == len(mixed_jobs), bound


@pytest.mark.parametrize("model, action, value", [
    ("job", "retry_jobs", "zz"), ("job", "delete_selected", "\x00"),
    ("job", "cancel_jobs", "x" * 5000), ("queue", "pause_queues", "default\x00"),
    ("cronschedule", "pause_schedules", "zz"),
])
def test_a_forged_selection_answers_400_and_changes_nothing(admin_client_op, mixed_jobs,
                                                            schedule, model, action, value):
    response = admin_client_op.post(LISTS[model], {
        "action": action, "index": "0", "_selected_action": [value, str(mixed_jobs["dead"].pk)]})
    assert response.status_code == 400
    assert Job.objects.count() == len(mixed_jobs) and not Queue.objects.exists()
    assert not CronSchedule.objects.filter(paused=True).exists()


def test_a_worker_filter_with_nul_or_a_lone_surrogate_finds_nothing(mixed_jobs):
    for worker in ("\x00", "tests.workers.Explode\x00", "\ud800"):
        assert dashboard.list_jobs(worker=worker).jobs == []
    assert dashboard.list_jobs(worker="tests.workers.Explode").jobs  # the filter still works


# -- item 6: every action needs the view permission and its own ------------------------------

@pytest.mark.parametrize("action, permission, job", [
    ("retry_jobs", "retry_job", "dead"), ("cancel_jobs", "cancel_job", "available"),
    ("rerun_jobs", "rerun_job", "completed"), ("delete_selected", "delete_job", "cancelled"),
])
def test_a_job_action_needs_the_view_permission_too(db, mixed_jobs, action, permission, job):
    target = mixed_jobs[job]
    before = set(Job.objects.values_list("id", "state"))
    button = reverse("admin:kathikon_job_action", args=[target.id.hex, action])
    client = client_with(permission)  # the action's permission, not the view one
    assert client.post(button).status_code == 403
    assert client.post(reverse("admin:kathikon_job_changelist"), {
        "action": action, "index": "0", "_selected_action": [str(target.pk)]}).status_code == 403
    assert set(Job.objects.values_list("id", "state")) == before

    client = client_with("view_job")  # the view permission, not the action's
    assert client.post(button).status_code == 403
    assert set(Job.objects.values_list("id", "state")) == before


@pytest.mark.parametrize("action, permission, job", [
    ("retry_jobs", "retry_job", "dead"), ("delete_selected", "delete_job", "cancelled"),
])
def test_a_job_button_runs_with_view_and_its_permission(db, mixed_jobs, action, permission, job):
    target = mixed_jobs[job]
    client = client_with("view_job", permission)
    response = client.post(reverse("admin:kathikon_job_action", args=[target.id.hex, action]))
    assert response.status_code == 302
    assert not Job.objects.filter(pk=target.pk, state=target.state).exists()


def test_the_delete_page_of_a_job_needs_the_view_permission_too(db, mixed_jobs):
    job = mixed_jobs["cancelled"]
    url = reverse("admin:kathikon_job_delete", args=[job.pk])
    client = client_with("delete_job")
    assert client.get(url).status_code == 403
    assert client.post(url, {"post": "yes"}).status_code == 403
    assert Job.objects.filter(pk=job.pk).exists()
    client = client_with("view_job", "delete_job")
    assert client.post(url, {"post": "yes"}).status_code == 302
    assert not Job.objects.filter(pk=job.pk).exists()


def test_pausing_queues_and_schedules_needs_the_view_permission_too(db, mixed_jobs, schedule):
    client = client_with("pause_queue", "pause_cronschedule")
    for url in ("admin:kathikon_queue_pause_all", "admin:kathikon_queue_resume_all"):
        assert client.post(reverse(url)).status_code == 403
    assert client.post(LISTS["queue"], {"action": "pause_queues", "index": "0",
                                        "_selected_action": ["default"]}).status_code == 403
    assert client.post(LISTS["cronschedule"], {
        "action": "pause_schedules", "index": "0",
        "_selected_action": [str(schedule.pk)]}).status_code == 403
    assert not Queue.objects.exists() and not CronSchedule.objects.filter(paused=True).exists()

    client = client_with("view_queue", "view_cronschedule")  # watching is not pausing
    assert client.post(reverse("admin:kathikon_queue_pause_all")).status_code == 403
    assert client.post(reverse("admin:kathikon_queue_change", args=["default"]),
                       {"concurrency": "3"}).status_code == 403
    assert not Queue.objects.exists()

    client = client_with("view_queue", "pause_queue")
    assert client.post(reverse("admin:kathikon_queue_pause_all")).status_code == 302
    assert Queue.objects.filter(name="default", paused=True).exists()
