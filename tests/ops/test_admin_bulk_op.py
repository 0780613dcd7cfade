"""The job list's actions on everything a filter matches (kathikon.admin.bulk), through
Django's test client on every database: asked first, run in chunks, permission checked,
logged in each job's history."""

from __future__ import annotations

import logging

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

import kathikon
from kathikon.admin import bulk
from kathikon.models import Job, JobEvent
from kathikon.states import JobState
from tests import workers
from tests.ops.conftest import VIEW_ALL, staff_user

URL = reverse("admin:kathikon_job_changelist")


def dead_jobs(count: int, queue: str = "default") -> None:
    worker = workers.Emails if queue == "emails" else workers.Explode
    kathikon.insert_many([(worker, {"i": i}) for i in range(count)])
    Job.objects.filter(queue=queue).update(state=JobState.DEAD, attempts=3)


def select_all(client: Client, name: str, query: str, **extra: str):
    """What "Select all N jobs" and Go post: the action on every match of the filter (with
    the boxes of the page's rows ticked, as the browser sends them)."""
    page = [str(pk) for pk in Job.objects.order_by("-id").values_list("pk", flat=True)[:100]]
    return client.post(f"{URL}?{query}", {"action": name, "index": "0", "select_across": "1",
                                          "_selected_action": page, **extra})


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_retry_every_dead_job_of_a_queue_asks_first_then_runs_in_chunks(
        admin_client_op, monkeypatch, caplog):
    monkeypatch.setattr(bulk, "CHUNK", 40)
    dead_jobs(150)
    dead_jobs(5, queue="emails")
    asked = select_all(admin_client_op, "retry_jobs", "state=dead&queue=default")
    assert asked.status_code == 200
    page = asked.content.decode()
    assert 'id="kathikon-bulk-count">150<' in page
    assert "<code>state=dead&amp;queue=default</code>" in page
    assert page.count("<tr><td><code>") == bulk.SAMPLE
    assert Job.objects.filter(state=JobState.DEAD).count() == 155  # nothing done yet
    with caplog.at_level(logging.INFO, logger="kathikon.admin"):
        done = select_all(admin_client_op, "retry_jobs", "state=dead&queue=default",
                          kathikon_confirmed="yes")
    assert done.status_code == 302
    said = messages_of(done)
    assert "Retried 150 jobs." in said and "Ran in 4 chunks of up to 40 jobs." in said
    assert Job.objects.filter(queue="default", state=JobState.AVAILABLE).count() == 150
    assert Job.objects.filter(queue="emails", state=JobState.DEAD).count() == 5
    actors = set(JobEvent.objects.filter(kind="retried").values_list("actor", flat=True))
    assert actors == {"admin:root"}
    assert JobEvent.objects.filter(kind="retried").count() == 150
    assert "admin:root ran retry on 150 job(s) in 4 chunk(s), 0 refused (filter: " \
           "state=dead&queue=default)" in caplog.text


def test_a_few_selected_jobs_run_at_once_and_refusals_are_listed(admin_client_op):
    dead_jobs(3)
    ids = list(Job.objects.values_list("pk", flat=True))
    Job.objects.filter(pk=ids[0]).update(state=JobState.RUNNING, attempted_by="n")
    response = admin_client_op.post(URL, {"action": "retry_jobs", "index": "0",
                                          "_selected_action": [str(pk) for pk in ids]})
    assert response.status_code == 302
    said = messages_of(response)
    assert "Retried 2 jobs." in said
    assert any(text.startswith("Could not retry 1 job") and "being run" in text
               for text in said)


def test_rerun_of_every_match_never_reruns_its_own_new_jobs(admin_client_op, monkeypatch):
    monkeypatch.setattr(bulk, "CHUNK", 7)
    kathikon.insert_many([(workers.Succeed, {"i": i}) for i in range(20)])
    Job.objects.update(state=JobState.COMPLETED, attempts=1)
    done = select_all(admin_client_op, "rerun_jobs", "queue=default", kathikon_confirmed="yes")
    assert "Reran 20 jobs." in messages_of(done)
    assert Job.objects.count() == 40  # the 20 new ones were not rerun in turn


def test_workflow_steps_retry_through_the_single_path_and_continue(admin_client_op):
    from kathikon.testing import drain_queue
    from tests.workflows.steps import Fail

    wf = kathikon.Workflow("bulk")
    wf.add("a", Fail, {})
    wf.add("b", workers.Succeed, {}, deps=["a"])
    wf.insert()
    drain_queue()
    assert Job.objects.get(step="b").state == JobState.CANCELLED  # a died: b was cancelled
    dead_jobs(2, queue="emails")
    done = select_all(admin_client_op, "retry_jobs", "state=dead", kathikon_confirmed="yes")
    assert "Retried 3 jobs." in messages_of(done)
    assert Job.objects.get(step="a").state == JobState.AVAILABLE
    assert Job.objects.get(step="b").state == JobState.WAITING  # the workflow goes on


def test_without_the_permission_the_action_on_every_match_is_refused(db):
    dead_jobs(120)
    staff_user("viewer", *VIEW_ALL)
    client = Client()
    client.login(username="viewer", password="pw")
    assert 'value="retry_jobs"' not in client.get(f"{URL}?state=dead").content.decode()
    for confirmed in ("", "yes"):
        forged = select_all(client, "retry_jobs", "state=dead", kathikon_confirmed=confirmed)
        assert forged.status_code == 403
    assert Job.objects.filter(state=JobState.DEAD).count() == 120
    assert not JobEvent.objects.exists()


@pytest.fixture
def admin_client_op(db):
    from django.contrib.auth.models import User

    User.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.login(username="root", password="pw")
    return client
