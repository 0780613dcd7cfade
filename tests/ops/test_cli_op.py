"""manage.py kathikon_ops: tables, --json, and clear errors with a non-zero exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import override_settings

import kathikon
from kathikon import storage
from kathikon.models import Job, Queue
from kathikon.states import JobState

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def ops(*args: str) -> str:
    out = StringIO()
    call_command("kathikon_ops", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def ops_json(*args: str):
    return json.loads(ops(*args, "--json"))


def test_summary_table_and_json(mixed_jobs):
    storage.register_node("node-a", queues={"default": 10, "emails": 5})
    table = ops("summary")
    header, *lines = table.splitlines()
    assert header.split()[:3] == ["QUEUE", "STATUS", "CONC"]
    assert lines[0].split()[:4] == ["default", "running", "10", "1"]
    # Columns are aligned: every row starts its second column at the same place.
    assert len({line.index(line.split()[1]) for line in [header, *lines]}) == 1
    data = {row["name"]: row for row in ops_json("summary")}
    assert data["default"]["counts"]["dead"] == 1 and data["emails"]["concurrency"] == 5
    assert data["default"]["total"] == 8 and data["default"]["completed_last_hour"] == 1


def test_jobs_filters_and_cursor(mixed_jobs):
    data = ops_json("jobs", "--state", "dead")
    assert {job["id"] for job in data["jobs"]} == {mixed_jobs["dead"].id.hex,
                                                   mixed_jobs["emails"].id.hex}
    assert data["next_cursor"] is None
    page = ops_json("jobs", "--limit", "3")
    assert len(page["jobs"]) == 3 and page["next_cursor"] == page["jobs"][-1]["id"]
    rest = ops_json("jobs", "--cursor", page["next_cursor"], "--limit", "100")
    assert len(rest["jobs"]) == len(mixed_jobs) - 3
    assert ops_json("jobs", "--queue", "emails", "--worker", "tests.workers.Emails")["jobs"]
    table = ops("jobs", "--limit", "2")
    assert table.splitlines()[0].split()[:4] == ["ID", "WORKER", "QUEUE", "STATE"]
    assert "next page: --cursor" in table


def test_failures(mixed_jobs):
    rows = ops_json("failures")
    assert {(r["worker"], r["kind"]) for r in rows} >= {
        ("tests.workers.Explode", "builtins.RuntimeError"),
        ("tests.workers.Emails", "smtplib.SMTPError")}
    assert "smtplib.SMTPError" not in {r["kind"] for r in ops_json("failures", "--window", "2m")}
    assert "SAMPLE MESSAGE" in ops("failures")


def test_show(mixed_jobs):
    job = mixed_jobs["dead"]
    data = ops_json("show", job.id.hex)
    assert data["job"]["state"] == "dead" and len(data["job"]["errors"]) == 2
    assert {"inserted", "failed", "dead"} <= {item["event"] for item in data["history"]}
    text = ops("show", job.id.hex)
    assert "Traceback (most recent call last)" in text and "history:" in text


def test_retry_cancel_rerun(mixed_jobs):
    assert ops("retry", mixed_jobs["dead"].id.hex).strip() == f"retried {mixed_jobs['dead'].id.hex}"
    assert kathikon.fetch(mixed_jobs["dead"].id).state == JobState.AVAILABLE
    data = ops_json("cancel", mixed_jobs["available"].id.hex)
    assert data == {"changed": [mixed_jobs["available"].id.hex], "failed": []}
    data = ops_json("rerun", mixed_jobs["completed"].id.hex)
    assert Job.objects.get(pk=data["changed"][0]).meta["rerun_of"] == mixed_jobs[
        "completed"].id.hex


def test_partial_failure_exits_non_zero(mixed_jobs):
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError, match="1 of 2 job"):
        call_command("kathikon_ops", "cancel", mixed_jobs["scheduled"].id.hex,
                     mixed_jobs["running"].id.hex, stdout=out, stderr=err)
    assert kathikon.fetch(mixed_jobs["scheduled"].id).state == JobState.CANCELLED
    assert "cannot be cancelled now" in err.getvalue()


@pytest.mark.parametrize("args, message", [
    (("show", "0" * 32), "no job with id"),
    (("show", "nonsense"), "no job with id"),
    (("retry", "f" * 32), "could not be retried"),
    (("jobs", "--state", "bogus"), "invalid choice: 'bogus'"),
    (("jobs", "--queue", "bad queue!"), "bad queue name"),
    (("jobs", "--cursor", "zz"), "bad cursor"),
    (("pause",), "give a queue name or --all"),
    (("pause", "x", "--all"), "give a queue name or --all"),
    (("pause", "no spaces"), "bad queue name"),
    (("prune", "--older-than", "soon"), "bad duration"),
    (("failures", "--limit", str(10**30)), "not an int from 1 to 2147483647"),  # SQLite's bind
])
def test_errors_are_command_errors(db, args, message):
    with pytest.raises(CommandError, match=message):
        ops(*args)


def test_pause_resume(db):
    assert ops("pause", "emails").strip() == "paused: emails"
    assert Queue.objects.get(name="emails").paused
    assert ops_json("resume", "emails") == {"resumed": ["emails"]}
    assert ops_json("pause", "--all") == {"paused": ["default", "emails"]}
    assert Queue.objects.filter(paused=True).count() == 2
    assert ops("resume", "--all").strip() == "resumed: default, emails"
    assert not Queue.objects.filter(paused=True).exists()


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_pause_or_resume_of_an_unknown_queue_is_refused_unless_create(db, action):
    """A typo used to get a row, which every worker without --queues then served."""
    with pytest.raises(CommandError) as refused:
        ops(action, "emials")
    assert str(refused.value) == (
        "unknown queue 'emials' (did you mean 'emails'?): no setting, Queue row or live worker "
        "knows it; known queues: default, emails. Nothing changed; to make a new queue, which "
        "workers then serve, add --create.")
    assert not Queue.objects.exists()
    assert ops_json(action, "imports", "--create") == {f"{action}d": ["imports"]}
    assert Queue.objects.get(name="imports").paused == (action == "pause")
    assert ops_json(action, "imports") == {f"{action}d": ["imports"]}  # a row: known now
    storage.register_node("n1", queues={"by-hand": 2})  # a live node runs it: known
    assert ops_json(action, "by-hand") == {f"{action}d": ["by-hand"]}


def test_prune(job_factory):
    job_factory(state=JobState.COMPLETED, finished_ago=8 * 86400)
    job_factory(state=JobState.DEAD, finished_ago=7200)
    assert ops_json("prune") == {"deleted": 1}
    assert ops("prune", "--older-than", "1h", "--yes").strip() == "pruned 1 finished job(s)"
    assert not Job.objects.exists()


@override_settings(KATHIKON={"QUEUES": {"default": {}}, "ALLOW_DESTRUCTIVE_ACTIONS": False})
def test_destructive_commands_refused_by_setting(mixed_jobs):
    with pytest.raises(CommandError, match="destructive actions are disabled"):
        ops("retry", mixed_jobs["dead"].id.hex)
    with pytest.raises(CommandError, match="destructive actions are disabled"):
        ops("pause", "--all")
    assert ops_json("summary")  # reads still work


@pytest.mark.django_db(transaction=True)
def test_real_process_exit_codes(job_factory):
    """From a shell: exit 0 with JSON on stdout; exit 1 and the message on stderr."""
    job = job_factory(state=JobState.DEAD)
    env = {**os.environ, "KATHIKON_DB_NAME": connection.settings_dict["NAME"],
           "PYTHONPATH": str(ROOT)}
    manage = [sys.executable, str(ROOT / "testproject" / "manage.py"), "kathikon_ops"]
    ok = subprocess.run([*manage, "show", job.id.hex, "--json"], env=env, capture_output=True,
                        text=True, timeout=60, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["job"]["id"] == job.id.hex
    missing = subprocess.run([*manage, "show", "0" * 32], env=env, capture_output=True,
                             text=True, timeout=60, cwd=ROOT)
    assert missing.returncode == 1 and "no job with id" in missing.stderr
    bad = subprocess.run([*manage, "jobs", "--state", "bogus"], env=env, capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert bad.returncode != 0 and "invalid choice" in bad.stderr
