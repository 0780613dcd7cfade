"""A Django Task's job names its task wherever a worker path is shown (issue 25 item 3).

The worker column of a task's job holds the task's import path, which resolves to
``kathikon.backends.TaskWorker``: the admin's job list, its worker filter, the failure
summaries, ``kathikon_ops`` and the worker's log lines show and filter by the task, with
the indexes every worker path already has. Jobs enqueued before that (worker
``kathikon.backends.TaskWorker``, the task in their args) still run and show their task.
"""

from __future__ import annotations

import importlib
import json
from io import StringIO
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection

import kathikon
from kathikon import report
from kathikon.compat import TASK_WORKER
from kathikon.models import Job
from kathikon.testing import drain_queue
from tests.ecosystem import tasks
from tests.ecosystem.conftest import wait_until
from tests.ops.conftest import make_job

pytest.importorskip("kathikon.backends", reason="needs django.tasks or django-tasks")

ADD, FAILS = "tests.ecosystem.tasks.add", "tests.ecosystem.tasks.always_fails"
JOBS_URL = "/admin/kathikon/job/"


@pytest.fixture
def task_jobs(db):
    """Two tasks' jobs, one of them dead, a plain worker's job and a job from before."""
    tasks.add.enqueue(1, 2)
    tasks.always_fails.enqueue("no")
    drain_queue()  # add completes; always_fails has a retry due
    drain_queue(with_scheduled=True)  # its last attempt: dead
    make_job(args={"x": 1})
    legacy = make_job(worker=TASK_WORKER, args={"task": ADD, "args": [3, 4], "kwargs": {}},
                      meta={"task_backend": "default"})
    return legacy


def test_a_tasks_job_holds_its_path_and_runs_it(db):
    result = tasks.add.enqueue(2, 3)
    assert Job.objects.get(pk=result.id).worker == ADD
    assert drain_queue().completed == 1
    result.refresh()
    assert result.return_value == 5


def test_a_job_from_before_still_runs_and_shows_its_task(db):
    legacy = make_job(worker=TASK_WORKER, args={"task": ADD, "args": [3, 4], "kwargs": {}},
                      meta={"task_backend": "default"})
    assert legacy.shown_worker == ADD
    assert drain_queue().completed == 1
    assert Job.objects.get(pk=legacy.pk).result == 7
    plain = make_job(args={"task": "not a task"})  # args of a plain worker are only args
    assert plain.shown_worker == plain.worker


def test_the_migration_names_the_task_of_older_jobs_and_back(db):
    legacy = make_job(worker=TASK_WORKER, args={"task": ADD, "args": [3, 4], "kwargs": {}},
                      meta={"task_backend": "default"})
    plain = make_job(args={"task": ADD})  # a plain worker's args: left alone
    migration = importlib.import_module("kathikon.migrations.0017_task_jobs_name_their_task")
    editor = SimpleNamespace(connection=connection)
    migration.name_the_task(apps, editor)
    assert Job.objects.get(pk=legacy.pk).worker == ADD
    assert Job.objects.get(pk=plain.pk).worker == plain.worker
    migration.name_task_worker(apps, editor)
    assert Job.objects.get(pk=legacy.pk).worker == TASK_WORKER
    assert Job.objects.get(pk=plain.pk).worker == plain.worker


def test_a_task_is_a_worker_for_insert_and_the_testing_helpers(db):
    kathikon.insert(tasks.add, {"args": [5, 6]})  # the Task itself as the worker
    kathikon.testing.assert_enqueued(worker=tasks.add, args={"args": [5, 6]})
    kathikon.testing.assert_enqueued(worker=TASK_WORKER)  # tests written before: any task
    kathikon.testing.refute_enqueued(worker=tasks.send_email)
    assert drain_queue().completed == 1


def test_admin_job_list_names_the_task_and_filters_by_it(task_jobs, admin_client):
    page = admin_client.get(JOBS_URL).content.decode()
    # add's job and the job from before (its worker column still says TaskWorker) both
    # show add; the list cell is the function's name, its title the whole path
    assert page.count(f'title="{ADD}"') == 2 and page.count(f'title="{FAILS}"') == 1
    assert f"?worker={ADD}" in page  # the worker filter offers the task
    filtered = admin_client.get(JOBS_URL, {"worker": ADD})
    assert {job.worker for job in filtered.context["cl"].result_list} == {ADD}
    assert filtered.context["cl"].result_count == 1


def test_failure_summary_and_ops_name_the_task(task_jobs):
    [failure] = report.failure_summary()
    assert (failure.worker, failure.count) == (FAILS, 1)
    out = StringIO()
    call_command("kathikon_ops", "failures", "--json", stdout=out)
    assert json.loads(out.getvalue())[0]["worker"] == FAILS
    out = StringIO()
    call_command("kathikon_ops", "jobs", stdout=out)
    table = out.getvalue()
    assert FAILS in table and ADD in table and TASK_WORKER not in table
    out = StringIO()
    call_command("kathikon_ops", "jobs", "--worker", FAILS, "--json", stdout=out)
    assert [job["worker"] for job in json.loads(out.getvalue())["jobs"]] == [FAILS]


@pytest.mark.slow
def test_the_worker_log_names_the_task(worker_processes):
    ok, failing = tasks.add.enqueue(1, 1), tasks.always_fails.enqueue("boom")
    worker = worker_processes.start("-v", "2", settings={"POLL_INTERVAL": 0.1})
    wait_until(lambda: Job.objects.filter(state__in=["completed", "dead"]).count() == 2,
               timeout=30, message="both tasks to finish")
    wait_until(lambda: f"{failing.id} {FAILS} attempt 2/2" in worker.log(), timeout=10,
               message="the failure's log line")
    log = worker.log()
    assert f"{ok.id} {ADD} attempt 1/20 completed" in log  # max_attempts: the default
    assert "TaskWorker" not in log
