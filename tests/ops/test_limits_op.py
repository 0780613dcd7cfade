"""Flow limits in operations: set at run time, shown with their use by report, CLI and admin."""

from __future__ import annotations

import json
import threading
import time
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from django.urls import reverse

import kathikon
from kathikon import report, signals, storage
from kathikon.models import Queue
from kathikon.runtime.dispatcher import Dispatcher
from kathikon.runtime.worker import WorkerProcess
from tests import workers

pytestmark = pytest.mark.django_db
QUEUES = {"default": {"concurrency": 10},
          "sync": {"concurrency": 4, "partition": {"by": "args.account", "limit": 1}}}


def ops(*args: str) -> str:
    out = StringIO()
    call_command("kathikon_ops", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_set_queue_limits_persists_an_override_key_by_key_and_reset_drops_it():
    with override_settings(KATHIKON={"QUEUES": QUEUES}):
        effective = kathikon.set_queue_limits("sync", global_limit=3)
        assert effective["global_limit"] == 3
        assert effective["partition"] == {"by": "args.account", "limit": 1}  # from settings
        kathikon.set_queue_limits("sync", rate_limit={"allowed": 5, "period": 2})
        assert Queue.objects.get(name="sync").limits == {
            "global_limit": 3, "rate_limit": {"allowed": 5, "period": 2}}
        assert kathikon.set_queue_limits("sync", partition=None)["partition"] is None
        assert kathikon.set_queue_limits("sync", reset=True) == {
            "global_limit": None, "partition": {"by": "args.account", "limit": 1},
            "rate_limit": None}
        assert Queue.objects.get(name="sync").limits is None


@pytest.mark.parametrize("limits", [{"global_limit": -1}, {"colour": 1},
                                    {"partition": {"by": "args.a b"}},
                                    {"global_limit": 2**63}, {"global_limit": 10**400},
                                    {"partition": {"by": "worker", "limit": 10**30}},
                                    {"rate_limit": {"allowed": 10**30, "period": 60}}])
def test_bad_limits_change_nothing(limits: dict[str, Any]):
    kathikon.set_queue_limits("default", global_limit=2)
    with pytest.raises(kathikon.InvalidQueue):
        kathikon.set_queue_limits("default", **limits)
    assert Queue.objects.get(name="default").limits == {"global_limit": 2}
    with pytest.raises(kathikon.InvalidQueue):
        kathikon.set_queue_limits("bad name!", global_limit=1)


def clear_of_a_window_edge(period: float, margin: float = 10.0) -> None:
    """Rate windows are aligned to the epoch: start where the claim and the summary after it
    fall in one window (a run that crossed a minute's edge read the next window's 10 left)."""
    left = period - time.time() % period
    if left < margin:
        time.sleep(left + 0.05)


def test_summary_shows_limits_and_their_use():
    clear_of_a_window_edge(60)
    with override_settings(KATHIKON={"QUEUES": QUEUES}):
        kathikon.insert_many([(workers.Succeed, {"account": i % 2}, {"queue": "sync"})
                              for i in range(4)])
        kathikon.set_queue_limits("sync", global_limit=3,
                                  rate_limit={"allowed": 10, "period": 60})
        from kathikon.limits import merged
        from kathikon.storage.limited import claim_limited_jobs

        row = storage.queue_rows()["sync"]
        claim_limited_jobs("sync", 4, "n1", merged(QUEUES["sync"], row.limits))
        sync = next(s for s in report.queue_summary() if s.name == "sync")
        assert sync.partitions == {"0": 1, "1": 1}
        assert sync.rate_left == 8
        assert sync.limits_text == ("global 2/3; 1 per args.account (2 busy, 2 full); "
                                    "rate 8 left of 10/60s")
        table = ops("summary")
        assert "LIMITS" in table.splitlines()[0]
        assert "global 2/3" in table
        default = next(s for s in report.queue_summary() if s.name == "default")
        assert default.limits_text == "" and default.rate_left is None


def test_ops_limits_command_sets_and_prints_the_effective_limits():
    out = ops("limits", "default", "--global-limit", "3", "--partition", "worker:2",
              "--rate", "60/60")
    assert "global_limit=3" in out and '"by": "worker"' in out
    data = json.loads(ops("limits", "default", "--global-limit", "none", "--json"))
    assert data["limits"]["global_limit"] is None
    assert data["limits"]["rate_limit"] == {"allowed": 60, "period": 60.0}
    with pytest.raises(CommandError, match="global_limit"):
        ops("limits", "default", "--global-limit", "0")
    for option, value in (("--global-limit", str(2**31)), ("--partition", f"worker:{10**30}"),
                          ("--rate", f"{10**30}/60")):
        with pytest.raises(CommandError, match=r"1\.\.2147483647"):
            ops("limits", "default", option, value)
    with override_settings(KATHIKON={"ALLOW_DESTRUCTIVE_ACTIONS": False}), \
            pytest.raises(CommandError):
        ops("limits", "default", "--reset")


def test_admin_lists_limits_and_validates_the_override(admin_client_op):
    kathikon.set_queue_limits("default", global_limit=3)
    html = admin_client_op.get(reverse("admin:kathikon_queue_changelist")).content.decode()
    assert "limits (in use)" in html.lower(), html[html.find("<thead"):html.find("</thead")]
    assert "global 0/3" in html
    url = reverse("admin:kathikon_queue_change", args=["default"])
    response = admin_client_op.post(url, {"name": "default", "concurrency": "",
                                          "limits": '{"global_limit": 0}'})
    assert response.status_code == 200 and "global_limit must be" in response.content.decode()
    for limits in (json.dumps({"partition": {"by": "worker", "limit": 10**30}}),
                   json.dumps({"rate_limit": {"allowed": 10**30, "period": 60}})):
        response = admin_client_op.post(url, {"name": "default", "concurrency": "",
                                              "limits": limits})
        assert response.status_code == 200 and "1..2147483647" in response.content.decode()
    assert Queue.objects.get(name="default").limits == {"global_limit": 3}
    response = admin_client_op.post(url, {"name": "default", "concurrency": "",
                                          "limits": '{"global_limit": 5}'})
    assert response.status_code == 302
    assert Queue.objects.get(name="default").limits == {"global_limit": 5}


def test_workers_pick_up_a_changed_limit_at_their_refresh():
    worker = WorkerProcess(node="n1", queues={"default": 2})
    worker.dispatchers["default"] = Dispatcher("default", 2, "n1", worker.acker)
    kathikon.set_queue_limits("default", global_limit=1)
    worker._refresh_queues()
    assert worker.dispatchers["default"].limits.global_limit == 1
    kathikon.set_queue_limits("default", reset=True)
    worker._refresh_queues()
    assert not worker.dispatchers["default"].limits


def test_limits_of_an_unknown_queue_is_refused_unless_create():
    """A typo used to get a row with the limits, which every worker then served."""
    with pytest.raises(CommandError) as refused:
        ops("limits", "emials", "--global-limit", "3")
    assert str(refused.value).startswith("unknown queue 'emials' (did you mean 'emails'?)")
    assert "known queues: default, emails" in str(refused.value)
    assert str(refused.value).endswith("add --create.")
    assert not Queue.objects.exists()
    with pytest.raises(CommandError, match="bad queue name"):
        ops("limits", "no spaces", "--create")
    assert ops("limits", "imports", "--global-limit", "3", "--create").startswith(
        "imports: global_limit=3")
    assert ops("limits", "imports", "--global-limit", "4").startswith("imports: global_limit=4")
    assert Queue.objects.get(name="imports").limits == {"global_limit": 4}
    with override_settings(KATHIKON={"QUEUES": QUEUES}):
        assert ops("limits", "sync", "--reset").startswith("sync: global_limit=null")


@pytest.mark.django_db(transaction=True)
def test_a_bad_limit_stored_before_validation_is_ignored_and_the_queue_runs(caplog):
    """A row written before limits were bounded: the worker logs it and uses the settings
    (on SQLite every claim failed with OverflowError and the jobs stayed available)."""
    Queue.objects.create(name="default", limits={"partition": {"by": "worker",
                                                               "limit": 10**30}})
    job = kathikon.insert(workers.Succeed, {})
    process = WorkerProcess(node="n1", queues={"default": 2}, burst=True,
                            handle_signals=False, services=(), poll_interval=0.1)
    thread = threading.Thread(target=process.run, daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():  # a wedged claim: stop it so the test fails rather than hangs
        process.stop()
        thread.join(10)
    assert kathikon.fetch(job.id).state == "completed"
    assert "ignoring the stored limits" in caplog.text and "1..2147483647" in caplog.text


def test_held_claims_are_signalled_aggregated():
    sent: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        sent.append(kwargs)

    signals.queue_limited.connect(receiver)
    try:
        dispatcher = Dispatcher("default", 2, "n1", None)  # type: ignore[arg-type]
        for _ in range(50):
            dispatcher._note_held("global_limit")
    finally:
        signals.queue_limited.disconnect(receiver)
    assert len(sent) == 1  # the first at once, the rest folded into the next (a second later)
    assert sent[0]["queue"] == "default" and sent[0]["limit"] == "global_limit"
    assert sent[0]["claims"] == 1 and dispatcher.held_claims == 50
