"""Admin and CLI bounds: bad numbers are refused with a clear message and change nothing."""

from __future__ import annotations

import datetime as dt
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from django.urls import reverse

from kathikon import conf, dashboard, report
from kathikon.conf import MAX_CONCURRENCY
from kathikon.management.commands.kathikon_worker import parse_queues
from kathikon.models import Job, Queue
from kathikon.states import JobState

pytestmark = pytest.mark.django_db


def ops(*args: str) -> str:
    out = StringIO()
    call_command("kathikon_ops", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def change(client, name: str, concurrency: str):
    return client.post(reverse("admin:kathikon_queue_change", args=[name]),
                       {"concurrency": concurrency})


# -- the queue concurrency form ---------------------------------------------------------------

def test_concurrency_form_does_not_save_when_destructive_actions_are_off(admin_client_op):
    Queue.objects.create(name="emails", concurrency=3)
    with override_settings(KATHIKON={"QUEUES": {"default": {}, "emails": {}},
                                     "ALLOW_DESTRUCTIVE_ACTIONS": False}):
        page = admin_client_op.get(reverse("admin:kathikon_queue_change", args=["emails"]))
        assert page.status_code == 200 and 'name="concurrency"' not in page.content.decode()
        assert change(admin_client_op, "emails", "7").status_code == 403
        assert change(admin_client_op, "default", "7").status_code == 403
    assert Queue.objects.get(name="emails").concurrency == 3
    assert not Queue.objects.filter(name="default").exists()


@pytest.mark.parametrize("value", ["0", "-1", str(MAX_CONCURRENCY + 1), "1000000"])
def test_concurrency_out_of_bounds_is_refused(admin_client_op, value):
    Queue.objects.create(name="emails", concurrency=3)
    response = change(admin_client_op, "emails", value)
    assert response.status_code == 200  # the form again, with the error
    html = response.content.decode()
    assert "errorlist" in html and ("greater than or equal to 1" in html
                                    or f"less than or equal to {MAX_CONCURRENCY}" in html)
    assert Queue.objects.get(name="emails").concurrency == 3


def test_concurrency_in_bounds_and_empty_are_saved(admin_client_op):
    assert change(admin_client_op, "emails", str(MAX_CONCURRENCY)).status_code == 302
    assert Queue.objects.get(name="emails").concurrency == MAX_CONCURRENCY
    assert change(admin_client_op, "emails", "").status_code == 302  # back to the settings
    assert Queue.objects.get(name="emails").concurrency is None
    assert {s.name: s.concurrency for s in report.queue_summary()}["emails"] == 5


def test_concurrency_bound_in_settings_and_worker_options(settings):
    settings.KATHIKON = {"QUEUES": {"default": {"concurrency": MAX_CONCURRENCY + 1}}}
    assert any(p.id == "kathikon.E003" and str(MAX_CONCURRENCY) in p.message
               for p in conf.load().problems)
    settings.KATHIKON = {"QUEUES": {"default": {"concurrency": MAX_CONCURRENCY}}}
    assert conf.load().problems == ()
    assert parse_queues(f"default:{MAX_CONCURRENCY}") == {"default": MAX_CONCURRENCY}
    with pytest.raises(CommandError, match=f"from 1 to {MAX_CONCURRENCY}"):
        parse_queues("default:1000000")


# -- durations that overflow ------------------------------------------------------------------

def test_failures_with_a_huge_window_is_a_clear_error():
    with pytest.raises(CommandError, match=r"window .* is not a usable duration"):
        ops("failures", "--window", "99999999999999999999w")
    with pytest.raises(ValueError, match="not a usable duration"):
        report.failure_summary(window=float("inf"))
    assert ops("failures", "--window", "5200w").splitlines()[-1] == "(none)"  # 100 years


def test_prune_with_a_huge_age_is_a_clear_error(job_factory):
    job = job_factory(state=JobState.COMPLETED, finished_ago=30 * 86400)
    with pytest.raises(CommandError, match=r"older_than .* is not a usable duration"):
        ops("prune", "--older-than", "999999999999w")
    with pytest.raises(ValueError, match="not a usable duration"):
        dashboard.prune(older_than=dt.timedelta.max)
    assert Job.objects.filter(pk=job.pk).exists()


# -- prune below the retention period ---------------------------------------------------------

def test_prune_older_than_zero_needs_yes(job_factory):
    recent = job_factory(state=JobState.COMPLETED, finished_ago=60)
    with pytest.raises(CommandError, match=r"shorter than the retention period.*--yes"):
        ops("prune", "--older-than", "0")
    with pytest.raises(CommandError, match="--yes"):
        ops("prune", "--older-than", "1d")
    assert Job.objects.filter(pk=recent.pk).exists()
    assert ops("prune", "--older-than", "0", "--yes").strip() == "pruned 1 finished job(s)"
    assert not Job.objects.filter(pk=recent.pk).exists()


def test_prune_at_or_beyond_the_retention_period_needs_no_yes(job_factory):
    old = job_factory(state=JobState.COMPLETED, finished_ago=8 * 86400)
    kept = job_factory(state=JobState.COMPLETED, finished_ago=86400)
    assert ops("prune", "--older-than", "7d").strip() == "pruned 1 finished job(s)"
    assert ops("prune").strip() == "pruned 0 finished job(s)"
    assert not Job.objects.filter(pk=old.pk).exists() and Job.objects.filter(pk=kept.pk).exists()
