"""The admin dashboard through django.test.Client: pages, actions, permissions, 403s."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.messages import get_messages
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import translation

import kathikon
from kathikon import storage
from kathikon.models import CronSchedule, Job, Queue
from kathikon.states import JobState
from tests import workers
from tests.ops.conftest import VIEW_ALL, make_job, staff_user

pytestmark = pytest.mark.django_db
CHANGELIST = "admin:kathikon_job_changelist"


def changelist(client: Client, **params: str):
    return client.get(reverse(CHANGELIST), params)


def action(client: Client, url_name: str, name: str, ids, **extra):
    data = {"action": name, "index": "0", "_selected_action": [str(pk) for pk in ids], **extra}
    return client.post(reverse(url_name), data)


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_job_list_shows_columns_badges_and_estimated_count(admin_client_op, mixed_jobs):
    response = changelist(admin_client_op)
    assert response.status_code == 200
    html = response.content.decode()
    assert mixed_jobs["dead"].id.hex in html
    assert 'class="kathikon-badge"' in html and ">dead</span>" in html
    assert "3/3" in html  # attempts/max of the dead job
    assert f"{len(mixed_jobs)} jobs" in html
    for header in ("worker", "queue", "state", "priority", "attempts", "inserted",
                   "due", "finished"):
        assert f">{header}<" in html.lower().replace("</a>", "<"), header


@pytest.mark.parametrize("params, expected", [
    ({"state": "dead"}, {"dead", "emails"}),
    ({"queue": "emails"}, {"emails"}),
    ({"worker": "tests.workers.Explode"}, {"dead", "retryable"}),
    ({"worker": "tests.workers.Explode", "state": "retryable"}, {"retryable"}),
    # Completed and executing jobs are outside the general indexes on PostgreSQL: the
    # filters still find them (through the completed and executing indexes).
    ({"state": "completed"}, {"completed", "completed_old"}),
    ({"state": "running"}, {"running"}),
    ({"queue": "default", "state": "completed"}, {"completed", "completed_old"}),
    ({"queue": "default"}, {"available", "scheduled", "running", "completed", "completed_old",
                            "dead", "retryable", "cancelled"}),
    ({"worker": "tests.workers.Succeed"}, {"available", "scheduled", "running", "completed",
                                           "completed_old", "cancelled"}),
    ({"worker": "tests.workers.Succeed", "state": "completed"}, {"completed", "completed_old"}),
    ({"worker": "tests.workers.Emails", "state": "completed"}, set()),
])
def test_job_list_filters(admin_client_op, mixed_jobs, params, expected):
    html = changelist(admin_client_op, **params).content.decode()
    shown = {name for name, job in mixed_jobs.items() if job.id.hex in html}
    assert shown == expected


def test_completed_jobs_are_listed_newest_finished_first(admin_client_op, mixed_jobs):
    # Finished long ago but inserted last: first by id, last by completed_at.
    late = Job.objects.get(pk=mixed_jobs["completed_old"].pk)
    html = changelist(admin_client_op, state="completed").content.decode()
    assert html.index(mixed_jobs["completed"].id.hex) < html.index(late.id.hex)
    Job.objects.filter(pk=late.pk).update(completed_at=late.completed_at.replace(year=2100))
    html = changelist(admin_client_op, state="completed").content.decode()
    assert html.index(late.id.hex) < html.index(mixed_jobs["completed"].id.hex)


def test_worker_filter_choices_include_workers_with_only_completed_jobs(admin_client_op,
                                                                        job_factory):
    from tests import workers

    job_factory(worker=workers.Emails, state=JobState.COMPLETED, queue="emails")
    job_factory(worker=workers.Explode, state=JobState.RUNNING)
    job_factory(state=JobState.DEAD, queue="adhoc")
    html = changelist(admin_client_op).content.decode()
    for value in ("worker=tests.workers.Emails", "worker=tests.workers.Explode",
                  "worker=tests.workers.Succeed", "queue=emails", "queue=adhoc"):
        assert value in html, value


def test_job_list_date_range_filter(admin_client_op, mixed_jobs):
    Job.objects.filter(pk=mixed_jobs["dead"].pk).update(
        inserted_at="2020-01-02T10:00:00Z", completed_at="2020-01-02T11:00:00Z")
    html = changelist(admin_client_op, inserted_at__range__gte="2020-01-01",
                      inserted_at__range__lte="2020-01-03").content.decode()
    assert mixed_jobs["dead"].id.hex in html and mixed_jobs["available"].id.hex not in html
    html = changelist(admin_client_op, completed_at__range__gte="2020-01-02",
                      completed_at__range__lte="2020-01-02").content.decode()
    assert mixed_jobs["dead"].id.hex in html and mixed_jobs["completed"].id.hex not in html


def test_job_search_by_id_worker_and_args(admin_client_op, job_factory):
    from tests import workers

    needle = job_factory(worker=workers.Emails, args={"email": "ada@example.com"})
    other = job_factory(args={"email": "bob@example.com"})
    for term in (needle.id.hex, str(needle.id), "ada@example", "Emails"):
        html = changelist(admin_client_op, q=term).content.decode()
        assert needle.id.hex in html and other.id.hex not in html, term


def test_job_detail_is_read_only_with_errors_and_history(admin_client_op, mixed_jobs):
    job = mixed_jobs["dead"]
    kathikon.retry(job.id)
    Job.objects.filter(pk=job.pk).update(state="dead")
    response = admin_client_op.get(reverse("admin:kathikon_job_change", args=[job.pk]))
    html = response.content.decode()
    assert response.status_code == 200
    assert "Traceback (most recent call last)" in html and "boom 3" in html
    assert "retried" in html and "inserted" in html  # history rows
    assert 'name="_save"' not in html  # not editable
    assert "Retry now" in html and "Rerun as a new job" in html and ">Cancel<" not in html


def test_job_not_found_and_add_forbidden(admin_client_op):
    assert admin_client_op.get(reverse("admin:kathikon_job_add")).status_code == 403
    response = admin_client_op.get(reverse("admin:kathikon_job_change", args=["0" * 32]))
    assert response.status_code == 302  # Django redirects to the list with a message


def test_retry_action_reports_changed_and_refused(admin_client_op, mixed_jobs):
    response = action(admin_client_op, CHANGELIST, "retry_jobs",
                      [mixed_jobs["dead"].pk, mixed_jobs["running"].pk])
    assert response.status_code == 302
    texts = messages_of(response)
    assert "Retried 1 job." in texts
    assert any(t.startswith("Could not retry 1 job: " + mixed_jobs["running"].id.hex)
               for t in texts)
    assert kathikon.fetch(mixed_jobs["dead"].id).state == JobState.AVAILABLE


def test_cancel_rerun_delete_actions(admin_client_op, mixed_jobs):
    response = action(admin_client_op, CHANGELIST, "cancel_jobs",
                      [mixed_jobs["available"].pk, mixed_jobs["running"].pk])
    texts = messages_of(response)
    assert "Cancelled 1 job." in texts and any("cannot be cancelled now" in t for t in texts)
    response = action(admin_client_op, CHANGELIST, "rerun_jobs", [mixed_jobs["completed"].pk])
    assert "Reran 1 job." in messages_of(response)
    assert Job.objects.filter(meta__rerun_of=mixed_jobs["completed"].id.hex).exists()
    response = action(admin_client_op, CHANGELIST, "delete_selected",
                      [mixed_jobs["cancelled"].pk, mixed_jobs["running"].pk])
    assert "Deleted 1 job." in messages_of(response)
    assert not Job.objects.filter(pk=mixed_jobs["cancelled"].pk).exists()
    assert Job.objects.filter(pk=mixed_jobs["running"].pk).exists()


def test_detail_page_buttons_post_actions(admin_client_op, mixed_jobs):
    job = mixed_jobs["dead"]
    url = reverse("admin:kathikon_job_action", args=[job.id.hex, "retry_jobs"])
    assert admin_client_op.get(url).status_code == 405
    response = admin_client_op.post(url)
    assert response.status_code == 302 and response.url == reverse(
        "admin:kathikon_job_change", args=[job.pk])
    assert kathikon.fetch(job.id).state == JobState.AVAILABLE
    bogus = reverse("admin:kathikon_job_action", args=[job.id.hex, "explode"])
    assert admin_client_op.post(bogus).status_code == 403


def test_view_only_user_sees_no_action_and_gets_403(viewer_client, mixed_jobs):
    response = changelist(viewer_client)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'name="action"' not in html and "retry_jobs" not in html
    detail = viewer_client.get(reverse("admin:kathikon_job_change",
                                       args=[mixed_jobs["dead"].pk])).content.decode()
    assert "Traceback" in detail and "Retry now" not in detail
    for name in ("retry_jobs", "cancel_jobs", "rerun_jobs", "delete_selected"):
        forged = action(viewer_client, CHANGELIST, name, [mixed_jobs["dead"].pk])
        assert forged.status_code == 403, name
    url = reverse("admin:kathikon_job_action", args=[mixed_jobs["dead"].id.hex, "retry_jobs"])
    assert viewer_client.post(url).status_code == 403
    assert kathikon.fetch(mixed_jobs["dead"].id).state == JobState.DEAD
    forged = action(viewer_client, "admin:kathikon_queue_changelist", "pause_queues",
                    ["default"])
    assert forged.status_code == 403
    assert viewer_client.post(reverse("admin:kathikon_queue_pause_all")).status_code == 403
    assert not Queue.objects.filter(paused=True).exists()


def test_each_action_needs_its_own_permission(db, mixed_jobs):
    staff_user("retrier", *VIEW_ALL, "retry_job")
    client = Client()
    client.login(username="retrier", password="pw")
    html = changelist(client).content.decode()
    assert 'value="retry_jobs"' in html and 'value="cancel_jobs"' not in html
    assert action(client, CHANGELIST, "cancel_jobs",
                  [mixed_jobs["available"].pk]).status_code == 403
    response = action(client, CHANGELIST, "retry_jobs", [mixed_jobs["dead"].pk])
    assert response.status_code == 302 and "Retried 1 job." in messages_of(response)


@override_settings(KATHIKON={"QUEUES": {"default": {}}, "ALLOW_DESTRUCTIVE_ACTIONS": False})
def test_destructive_switch_hides_actions_even_for_superusers(admin_client_op, mixed_jobs):
    html = changelist(admin_client_op).content.decode()
    assert 'value="retry_jobs"' not in html
    assert action(admin_client_op, CHANGELIST, "retry_jobs",
                  [mixed_jobs["dead"].pk]).status_code == 403
    html = admin_client_op.get(reverse("admin:kathikon_queue_changelist")).content.decode()
    assert "Pause all queues" not in html


def test_queue_admin_counts_rows_and_actions(admin_client_op, mixed_jobs, job_factory):
    job_factory(queue="adhoc")
    storage.register_node("node-a", queues={"default": 10, "emails": 5})
    response = admin_client_op.get(reverse("admin:kathikon_queue_changelist"))
    html = response.content.decode()
    assert response.status_code == 200
    assert not Queue.objects.exists()  # a GET writes nothing; every queue is listed anyway
    assert all(f'value="{name}"' in html for name in ("default", "emails", "adhoc"))
    assert ">running</span>" in html and "Pause all queues" in html
    assert 'title="not served by any live worker">not served</span>' in html  # adhoc
    response = action(admin_client_op, "admin:kathikon_queue_changelist", "pause_queues",
                      ["emails"])
    assert "Paused 1 queue." in messages_of(response)
    assert Queue.objects.get(name="emails").paused
    html = admin_client_op.get(reverse("admin:kathikon_queue_changelist")).content.decode()
    assert ">paused</span>" in html
    response = action(admin_client_op, "admin:kathikon_queue_changelist", "resume_queues",
                      ["emails"])
    assert not Queue.objects.get(name="emails").paused
    confirm = admin_client_op.get(reverse("admin:kathikon_queue_pause_all"))
    assert confirm.status_code == 200 and not Queue.objects.filter(paused=True).exists()
    assert 'data-queue="adhoc"' in confirm.content.decode()
    response = admin_client_op.post(reverse("admin:kathikon_queue_pause_all"))
    # The configured queues and "adhoc" (only in jobs): a worker may serve it with --queues.
    assert response.status_code == 302
    assert set(Queue.objects.filter(paused=True).values_list("name", flat=True)) == {
        "default", "emails", "adhoc"}
    admin_client_op.post(reverse("admin:kathikon_queue_resume_all"))
    assert not Queue.objects.filter(paused=True).exists()
    assert admin_client_op.put(reverse("admin:kathikon_queue_pause_all")).status_code == 405


def test_queue_concurrency_override_is_editable(admin_client_op):
    url = reverse("admin:kathikon_queue_change", args=["emails"])
    response = admin_client_op.post(url, {"concurrency": "3"})
    assert response.status_code == 302
    assert Queue.objects.get(name="emails").concurrency == 3
    from kathikon import report

    assert {s.name: s.concurrency for s in report.queue_summary()}["emails"] == 3


@override_settings(KATHIKON={"QUEUES": {"exports": {"concurrency": 4, "global_limit": 3}}})
def test_queue_form_shows_the_limits_in_force(admin_client_op):
    url = reverse("admin:kathikon_queue_change", args=["exports"])
    html = admin_client_op.get(url).content.decode()
    assert not Queue.objects.exists()  # reading the form writes nothing
    assert re.search(r'<textarea name="limits"[^>]*>\s*</textarea>', html)  # not "null"
    assert re.search(r'data-limit="global_limit"><th>global_limit</th><td><code>3</code></td>'
                     r"<td>settings</td>", html)
    assert "<strong>4</strong> jobs at once per node, from the settings" in html
    response = admin_client_op.post(url, {"concurrency": "2", "limits": '{"global_limit": 5}'})
    assert response.status_code == 302
    html = admin_client_op.get(url).content.decode()
    assert re.search(r"<code>5</code></td><td>run-time override</td>\s*<td>goes back to the "
                     r"settings' <code>3</code>", html)
    assert "Clearing it goes back to the settings' 4." in html
    admin_client_op.post(url, {"concurrency": "", "limits": ""})
    row = Queue.objects.get(name="exports")
    assert (row.concurrency, row.limits) == (None, None)


def test_overview_page(admin_client_op, mixed_jobs):
    response = admin_client_op.get(reverse("admin:app_list", args=["kathikon"]))
    html = response.content.decode()
    assert response.status_code == 200
    row = re.search(r'<tr data-queue="default">(.*?)</tr>', html, re.S).group(1)
    assert re.search(r'data-state="dead">\s*<a[^>]*>1</a>', row)
    assert 'data-state="completed">2<' in row and 'data-state="available">1<' in row
    assert 'data-completed="1"' in html and 'data-failed="2"' in html  # the SVG chart
    assert "<svg" in html and "builtins.RuntimeError" in html  # failures table
    index = admin_client_op.get(reverse("admin:index")).content.decode()
    assert reverse("admin:app_list", args=["kathikon"]) in index


def test_overview_lists_worker_classes_a_live_worker_holds_jobs_back_for(admin_client_op):
    url = reverse("admin:app_list", args=["kathikon"])
    assert 'id="kathikon-unknown-workers"' not in admin_client_op.get(url).content.decode()
    storage.register_node("old-1", "host", 1, {"default": 5})
    storage.set_node_unknown_workers("old-1", {"shop.workers.NewInRelease":
                                               "2026-12-03T10:00:00.123456+00:00"})
    storage.register_node("gone", "host", 2, {"default": 5})
    storage.set_node_unknown_workers("gone", {"shop.workers.Stale": "2026-12-03T09:00:00"})
    storage.mark_node_stopped("gone")  # a stopped node holds nothing back any more
    html = admin_client_op.get(url).content.decode()
    row = re.search(r'<tr data-unknown-worker="shop.workers.NewInRelease">(.*?)</tr>', html,
                    re.S)
    assert row is not None and "old-1" in row.group(1)
    assert "2026-12-03 10:00:00" in row.group(1)
    assert "shop.workers.Stale" not in html
    assert "Restart the workers listed" in html
    storage.register_node("old-1", "host", 3, {"default": 5})  # restarted: it knows now
    assert 'id="kathikon-unknown-workers"' not in admin_client_op.get(url).content.decode()


def test_overview_hidden_without_view_permission(db, mixed_jobs):
    staff_user("nodes-only", "view_node")
    client = Client()
    client.login(username="nodes-only", password="pw")
    html = client.get(reverse("admin:app_list", args=["kathikon"])).content.decode()
    assert 'id="kathikon-overview"' not in html


def test_cron_batch_and_node_pages(admin_client_op, job_factory):
    from django.utils import timezone

    from kathikon.models import Batch, Node

    now = timezone.now()
    schedule = CronSchedule.objects.create(
        worker="tests.workers.Succeed", expression="0 9 * * 1-5", timezone="Europe/Berlin",
        inserted_at=now, updated_at=now, next_fire_at=now)
    batch = Batch.objects.create(inserted_at=now, on_complete_worker="tests.workers.Succeed")
    job_factory(batch=batch, state=JobState.COMPLETED)
    Node.objects.create(name="host:1", hostname="host", pid=1, queues={"default": 10},
                        started_at=now, heartbeat_at=now)
    html = admin_client_op.get(reverse("admin:kathikon_cronschedule_changelist")).content.decode()
    assert "At 09:00 AM, Monday through Friday" in html and ">active</span>" in html
    with translation.override("de"):  # the reading follows the request's language
        html = admin_client_op.get(
            reverse("admin:kathikon_cronschedule_changelist")).content.decode()
    assert "Um 09:00" in html
    response = action(admin_client_op, "admin:kathikon_cronschedule_changelist",
                      "pause_schedules", [schedule.pk])
    assert response.status_code == 302
    schedule.refresh_from_db()
    assert schedule.paused
    html = admin_client_op.get(reverse("admin:kathikon_batch_changelist")).content.decode()
    assert batch.id.hex in html and "1 (1 / 0)" in html
    html = admin_client_op.get(reverse("admin:kathikon_node_changelist")).content.decode()
    assert "host:1" in html and "default:10" in html and ">running</span>" in html


def test_delete_view_of_a_job_removes_its_history(admin_client_op, mixed_jobs):
    from kathikon.models import JobEvent

    job = mixed_jobs["completed"]
    kathikon.retry(job.id)
    Job.objects.filter(pk=job.pk).update(state="completed")
    url = reverse("admin:kathikon_job_delete", args=[job.pk])
    assert admin_client_op.get(url).status_code == 200
    response = admin_client_op.post(url, {"post": "yes"})
    assert response.status_code == 302
    assert not Job.objects.filter(pk=job.pk).exists()
    assert not JobEvent.objects.filter(job_id=job.pk).exists()
    running = reverse("admin:kathikon_job_delete", args=[mixed_jobs["running"].pk])
    assert admin_client_op.get(running).status_code == 403


def test_overview_updates_live_every_5_seconds_unless_paused(admin_client_op):
    url = reverse("admin:app_list", args=["kathikon"])
    html = admin_client_op.get(url).content.decode()
    assert 'data-live-every="5"' in html and "kathikon/live.js" in html
    assert 'http-equiv="refresh"' not in html  # in place, never a reload
    assert 'data-live-every="30"' in admin_client_op.get(url, {"refresh": "30"}).content.decode()
    paused = admin_client_op.get(url, {"refresh": "0"}).content.decode()
    assert 'data-live-every="0"' in paused and "<strong>paused</strong>" in paused
    for bad in ("1", "abc", "-5", "99999"):
        assert 'data-live-every="5"' in admin_client_op.get(
            url, {"refresh": bad}).content.decode()


def test_a_job_list_that_fits_one_page_is_still_read_with_a_limit(admin_client_op, mixed_jobs):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    url = reverse("admin:kathikon_job_changelist")
    with CaptureQueriesContext(connection) as queries:
        response = admin_client_op.get(url, {"queue": "emails", "state": "dead"})
    assert response.status_code == 200
    assert [job.id for job in response.context["cl"].result_list] == [mixed_jobs["emails"].id]
    listed = [q["sql"] for q in queries.captured_queries
              if '"kathikon_job"."args"' in q["sql"] or "`kathikon_job`.`args`" in q["sql"]]
    assert listed and all("LIMIT" in sql for sql in listed), listed


DATE = re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\b")
# Django's default DATETIME_FORMAT ("Dec. 3, 2026, 1:05 p.m.") and raw ISO 8601 times.
OTHER_DATES = re.compile(r"\b[A-Z][a-z]{2,8}\.? \d{1,2}, \d{4}|\d{4}-\d\d-\d\dT\d\d:\d\d")


def job_page(client: Client, job: Job) -> str:
    return client.get(reverse("admin:kathikon_job_change", args=[job.pk])).content.decode()


def test_a_job_page_labels_its_finish_time_by_state(admin_client_op, mixed_jobs):
    dead = job_page(admin_client_op, mixed_jobs["dead"])
    assert "Dead at:" in dead and "Completed at" not in dead
    cancelled = job_page(admin_client_op, mixed_jobs["cancelled"])
    assert "Cancelled at:" in cancelled and "Completed at" not in cancelled
    assert "Completed at:" in job_page(admin_client_op, mixed_jobs["completed"])
    waiting = job_page(admin_client_op, mixed_jobs["available"])
    assert not re.search("(Completed|Dead|Cancelled) at:", waiting)


@pytest.mark.parametrize("url", ["job_change", "job_changelist", "cronschedule_changelist",
                                 "cronschedule_change", "node_changelist", "batch_changelist"])
def test_one_date_format_per_page(admin_client_op, mixed_jobs, url):
    from django.utils import timezone

    from kathikon.models import Batch, Node

    now = timezone.now()
    schedule = CronSchedule.objects.create(
        worker="tests.workers.Succeed", expression="0 9 * * 1-5", timezone="UTC",
        inserted_at=now, updated_at=now, next_fire_at=now, last_fire_at=now)
    Batch.objects.create(inserted_at=now, on_complete_worker="tests.workers.Succeed")
    Node.objects.create(name="host:1", hostname="host", pid=1, queues={"default": 10},
                        started_at=now, heartbeat_at=now)
    args = {"job_change": [mixed_jobs["dead"].pk], "cronschedule_change": [schedule.pk]}
    html = admin_client_op.get(reverse(f"admin:kathikon_{url}", args=args.get(url))).content
    text = re.sub(r"<[^>]*>", " ", html.decode())  # what is shown, not hover titles
    assert DATE.search(text) and not OTHER_DATES.search(text), OTHER_DATES.findall(text)


def test_retrying_a_dead_job_says_how_many_attempts_it_gets(admin_client_op, mixed_jobs):
    dead = mixed_jobs["dead"]  # 3 of 3 attempts used
    assert "Retry now (1 attempt left)" in job_page(admin_client_op, dead)
    url = reverse("admin:kathikon_job_action", args=[dead.id.hex, "retry_jobs"])
    said = messages_of(admin_client_op.post(url))
    assert said == ["Retried 1 job.",
                    "It runs again now with 1 attempt left (next: attempt 4 of 4)."]
    response = action(admin_client_op, CHANGELIST, "retry_jobs",
                      [mixed_jobs["emails"].pk, mixed_jobs["retryable"].pk])
    assert "They run again now: 1 with 1 attempt left, 1 with 2 attempts left." in (
        messages_of(response))


def test_a_running_job_page_says_why_it_has_no_cancel_button(admin_client_op, mixed_jobs):
    html = job_page(admin_client_op, mixed_jobs["running"])
    assert 'id="kathikon-no-cancel"' in html and "kathikon-cancel_jobs" not in html
    assert "pause the queue" in html and "SIGTERM" in html and "<code>node-1</code>" in html
    assert 'id="kathikon-no-cancel"' not in job_page(admin_client_op, mixed_jobs["available"])


def test_overview_draws_one_queues_chart_and_the_timing_percentiles(admin_client_op):
    from django.utils import timezone as tz

    now = tz.now()
    for queue, worker, count in (("default", workers.Succeed, 3), ("emails", workers.Emails, 2)):
        for _ in range(count):
            job = make_job(queue=queue, worker=worker, state=JobState.COMPLETED, attempts=1)
            Job.objects.filter(pk=job.pk).update(
                available_at=now - dt.timedelta(seconds=3),
                started_at=now - dt.timedelta(seconds=2),
                completed_at=now - dt.timedelta(seconds=1))
    url = reverse("admin:app_list", args=["kathikon"])
    every = admin_client_op.get(url).content.decode()
    assert 'data-completed="5"' in every and "<strong>all</strong>" in every
    assert '<tr data-timing-queue="default"><th>default</th><td>3</td>' in every
    assert '<td data-wait="p50">1.0 s</td>' in every and '<td data-run="p99">1.0 s</td>' in every
    emails = admin_client_op.get(url, {"chart": "emails"}).content.decode()
    assert 'data-completed="2"' in emails and "<strong>emails</strong>" in emails
    assert "last hour: queue emails" in emails
    unknown = admin_client_op.get(url, {"chart": "nope"}).content.decode()
    assert 'data-completed="5"' in unknown  # a name no queue has: every queue
