"""What a newcomer trips over: the admin without rangefilter, queues nobody serves, feedback."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core import checks
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

import kathikon
from kathikon import conf, dashboard, storage
from kathikon.executor import execute_job
from kathikon.models import Job, Queue
from kathikon.states import JobState
from kathikon.workers import Worker
from tests import workers

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
CHANGELIST = "admin:kathikon_job_changelist"


def ops(*args: str) -> str:
    out = StringIO()
    call_command("kathikon_ops", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


# -- the admin without "rangefilter" ----------------------------------------------------------

def test_job_list_works_without_rangefilter(admin_client_op, mixed_jobs, settings):
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "rangefilter"]
    response = admin_client_op.get(reverse(CHANGELIST))
    html = response.content.decode()
    assert response.status_code == 200
    assert "rangefilter" not in html and "By inserted" in html and "Past 7 days" in html
    # Django's own date filter filters the column: follow its "Past 7 days" link.
    Job.objects.filter(pk=mixed_jobs["dead"].pk).update(inserted_at="2020-01-02T10:00:00Z")
    link = re.search(r'<a href="(\?inserted_at__gte=[^"]*)"[^>]*>Past 7 days</a>', html)
    html = admin_client_op.get(reverse(CHANGELIST) + link.group(1).replace("&amp;", "&"))
    html = html.content.decode()
    assert mixed_jobs["available"].id.hex in html and mixed_jobs["dead"].id.hex not in html


def test_job_list_uses_date_ranges_with_rangefilter(admin_client_op, mixed_jobs):
    response = admin_client_op.get(reverse(CHANGELIST))
    html = response.content.decode()
    assert response.status_code == 200
    assert "inserted_at__range__gte" in html and "Past 7 days" not in html


def test_docs_show_the_full_installed_apps():
    for page in ("README.md", "docs/quick-start.md"):
        text = (ROOT / page).read_text()
        block = text[text.index("INSTALLED_APPS"):][:600]
        assert '"django.contrib.admin"' in block and '"kathikon"' in block, page
        assert '"rangefilter"' in block, page  # optional, shown with what it adds


def test_docs_install_from_a_checkout_or_git_and_say_what_tests_need():
    quick = (ROOT / "docs/quick-start.md").read_text()
    install = quick[quick.index("1. Install it"):quick.index("2. Add it")]
    assert "pip install -e" in install and "git+https://" in install
    assert "`pip install kathikon`\n   finds nothing" in install  # said, not recommended
    testing = (ROOT / "docs/testing.md").read_text()
    assert "pip install pytest pytest-django" in testing
    assert "DJANGO_SETTINGS_MODULE = mysite.settings" in testing


def test_quick_start_says_restart_after_code_changes_and_shows_v2():
    quick = (ROOT / "docs/quick-start.md").read_text()
    run = quick[quick.index("5. Run a worker"):quick.index("## Job ids")]
    assert "restart it after every code change" in run
    assert "python manage.py kathikon_worker -v 2" in run and "one line per finished job" in run


# -- queues nobody serves ---------------------------------------------------------------------

def worker_check_messages() -> list[checks.CheckMessage]:
    return [m for m in checks.run_checks(tags=[checks.Tags.compatibility])
            if m.id == "kathikon.W001"]


def test_check_warns_about_a_worker_queue_no_worker_serves(settings):
    reports = type("Reports", (Worker,), {"queue": "reports", "__module__": "myapp.workers"})
    try:
        [message] = worker_check_messages()
        assert "myapp.workers.Reports" in message.msg and "'reports'" in message.msg
        assert "KATHIKON['QUEUES']" in message.hint and "--queues reports" in message.hint
        settings.KATHIKON = {"QUEUES": {"default": {}, "emails": {}, "reports": {}}}
        assert worker_check_messages() == []
        # A queue TASKS declares for Kathikon's backend is served by default too.
        settings.KATHIKON = {"QUEUES": {"default": {}}}
        settings.TASKS = {"default": {"BACKEND": "kathikon.backends.KathikonBackend",
                                      "QUEUES": ["default", "emails", "reports"]}}
        assert worker_check_messages() == []
    finally:
        del reports
        gc.collect()
    assert worker_check_messages() == []


def test_served_queue_names_add_the_tasks_queues(settings):
    settings.KATHIKON = {"QUEUES": {"default": {}}}
    settings.TASKS = {"default": {"BACKEND": "kathikon.backends.KathikonBackend",
                                  "QUEUES": ["emails", "default"]},
                      "other": {"BACKEND": "elsewhere.Backend", "QUEUES": ["nope"]}}
    assert conf.served_queue_names() == ["default", "emails"]
    settings.TASKS = {"default": {"BACKEND": "kathikon.backends.KathikonBackend"}}
    assert conf.served_queue_names() == ["default"]  # Django's default queue


def test_ops_summary_says_which_queues_no_live_worker_serves(job_factory):
    job_factory(queue="reports")
    storage.register_node("node-a", queues={"default": 10})
    storage.register_node("gone", queues={"emails": 5})
    storage.mark_node_stopped("gone")
    table = ops("summary")
    status = {line.split()[0]: line.split()[1] for line in table.splitlines()[1:4]}
    assert status == {"default": "running", "emails": "unserved", "reports": "unserved"}
    assert ("queue reports: not served by any live worker (1 job(s) waiting); start one: "
            "manage.py kathikon_worker --queues reports") in table
    data = {row["name"]: row for row in __import__("json").loads(ops("summary", "--json"))}
    assert (data["reports"]["served"], data["reports"]["status"]) == (False, "unserved")
    assert data["default"]["served"] is True


def test_ops_summary_counts_silent_nodes_as_gone(job_factory, settings):
    import datetime as dt

    job_factory()
    storage.register_node("silent", queues={"default": 10},
                          at=storage.db_now() - dt.timedelta(seconds=conf.rescue_after() + 5))
    assert "queue default: not served by any live worker" in ops("summary")
    storage.heartbeat("silent")
    assert "queue default: not served" not in ops("summary")


def test_overview_marks_queues_no_live_worker_serves(admin_client_op, job_factory):
    job_factory(queue="reports")
    storage.register_node("node-a", queues={"default": 10, "emails": 5})
    html = admin_client_op.get(reverse("admin:app_list", args=["kathikon"])).content.decode()
    row = re.search(r'<tr data-queue="reports">(.*?)</tr>', html, re.S).group(1)
    assert 'data-status="unserved"' in row and ">not served</span>" in row
    assert 'data-unserved="reports"' in html and "not served by any live worker" in html
    default = re.search(r'<tr data-queue="default">(.*?)</tr>', html, re.S).group(1)
    assert ">running</span>" in default
    assert 'data-unserved="default"' not in html


def test_queues_page_get_writes_nothing(admin_client_op, job_factory):
    for queue in ("default", "reports", "adhoc"):
        job_factory(queue=queue)
    Queue.objects.create(name="emails", concurrency=3)
    before = list(Queue.objects.values_list("name", "paused", "concurrency", "updated_at"))
    with CaptureQueriesContext(connection) as queries:
        response = admin_client_op.get(reverse("admin:kathikon_queue_changelist"))
        change = admin_client_op.get(reverse("admin:kathikon_queue_change", args=["reports"]))
    assert response.status_code == 200 and change.status_code == 200
    writes = [q["sql"] for q in queries.captured_queries
              if re.match(r"\s*(INSERT|UPDATE|DELETE|REPLACE)", q["sql"], re.I)
              and "django_session" not in q["sql"]]
    assert writes == []
    assert list(Queue.objects.values_list("name", "paused", "concurrency", "updated_at")) == before
    html = response.content.decode()
    assert all(f'value="{name}"' in html for name in ("default", "emails", "reports", "adhoc"))
    assert 'name="action"' in html and "pause_queues" in html  # actions offered for them


def test_queue_without_row_can_be_paused_and_overridden_by_a_post(admin_client_op, job_factory):
    job_factory(queue="reports")
    html = admin_client_op.get(reverse("admin:kathikon_queue_changelist")).content.decode()
    assert not Queue.objects.exists() and 'name="action"' in html  # no row, still actions
    url = reverse("admin:kathikon_queue_changelist")
    admin_client_op.post(url, {"action": "pause_queues", "index": "0",
                               "_selected_action": ["reports"]})
    assert Queue.objects.get(name="reports").paused
    response = admin_client_op.post(reverse("admin:kathikon_queue_change", args=["adhoc2"]),
                                    {"concurrency": "4"})
    assert response.status_code == 302 and not Queue.objects.filter(name="adhoc2").exists()
    admin_client_op.post(reverse("admin:kathikon_queue_change", args=["default"]),
                         {"concurrency": "4"})
    assert Queue.objects.get(name="default").concurrency == 4


# -- feedback ---------------------------------------------------------------------------------

DEFAULT_PROJECT = """
import django
from django.conf import settings
settings.configure(INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth",
                                   "kathikon"],
                   DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                                          "NAME": ":memory:"}}, USE_TZ=True)
django.setup()
from kathikon import signals, telemetry
from kathikon.models import Queue
telemetry.attach_default_logger()
telemetry.attach_default_logger()  # idempotent: one handler, one line per event
signals.send(signals.queue_paused, Queue, queue="emails")
telemetry.detach_default_logger()
signals.send(signals.queue_paused, Queue, queue="after-detach")
"""


def test_attach_default_logger_prints_at_info_in_a_default_project():
    done = subprocess.run([sys.executable, "-c", DEFAULT_PROJECT], capture_output=True,
                          text=True, timeout=60, cwd=str(ROOT),
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "queue_paused" in line]
    assert len(lines) == 1 and "INFO kathikon queue_paused queue=emails" in lines[0], done.stderr


def test_attach_default_logger_keeps_a_configured_handler(caplog):
    import logging

    from kathikon import signals, telemetry

    logger = logging.getLogger("kathikon")
    handlers = list(logger.handlers)
    caplog.set_level(logging.INFO, logger="kathikon")
    telemetry.attach_default_logger()
    try:
        assert logger.handlers == handlers  # testproject's LOGGING configured one
        signals.send(signals.queue_paused, Queue, queue="emails")
    finally:
        telemetry.detach_default_logger()
    assert logger.handlers == handlers


def run_due(queue: str = "default") -> None:
    for job in storage.claim_jobs(queue, 100, "node-x"):
        execute_job(job)


def test_history_shows_started_for_every_attempt():
    job = kathikon.insert(workers.Explode, {})
    for _ in range(3):
        Job.objects.filter(pk=job.pk).update(available_at=storage.vendor.now())
        run_due()
    job = kathikon.fetch(job.id)
    assert job.state == JobState.DEAD and job.attempts == 3
    history = dashboard.fetch_job(job.id).history
    started = [item for item in history if item["event"] == "started"]
    assert [item["attempt"] for item in started] == [1, 2, 3]
    assert all(item["node"] == "node-x" for item in started)
    events = [(item["event"], item.get("attempt")) for item in history]
    for attempt in (1, 2, 3):  # each start comes before its failure
        assert events.index(("started", attempt)) < events.index(("failed", attempt))
    assert started[0]["at"] < started[1]["at"] < started[2]["at"]
