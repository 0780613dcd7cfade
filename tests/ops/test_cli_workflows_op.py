"""manage.py kathikon_ops workflows / workflow / workflow-cancel / release.

Workflows built with kathikon.Workflow and run in-process (drain_queue), then read
and steered through the command, as a person at a shell or a script would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import override_settings

import kathikon
from kathikon import Workflow, storage
from kathikon.exceptions import NotMigrated
from kathikon.models import Workflow as WorkflowRow
from kathikon.testing import drain_queue
from tests.runtime.test_unmigrated_database import empty_database, seen_by  # noqa: F401
from tests.workflows.steps import Fail, FailOnce, Plain, Record

pytestmark = pytest.mark.django_db(transaction=True)  # drain_queue acks as a worker does
ROOT = Path(__file__).resolve().parents[2]


def ops(*args: str) -> str:
    out = StringIO()
    call_command("kathikon_ops", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def ops_json(*args: str) -> Any:
    return json.loads(ops(*args, "--json"))


def step(wf: Workflow, name: str) -> kathikon.Job:
    return kathikon.Job.objects.get(workflow_id=wf.id, step=name)


@pytest.fixture
def flows() -> dict[str, Workflow]:
    """Four workflows, oldest first: completed, failed, running with a held step, and one
    not started (a step available, two waiting) inserted after the others ran."""
    chain = Workflow("chain")
    chain.add("a", Plain, {"value": 1})
    chain.add("b", Plain, {"value": 2}, deps=["a"])
    chain.add("c", Record, {}, deps=["a", "b"])
    chain.insert()
    failed = Workflow("retry-me")
    failed.add("a", FailOnce)
    failed.add("b", Plain, {}, deps=["a"])
    failed.add("c", Plain, {}, deps=["b"])
    failed.insert()
    policies = Workflow("policies")
    policies.add("a", Fail)
    policies.add("ok", Plain, {"value": 1})
    policies.add("run", Record, {}, deps=["a", "ok"], on_dep_failure="run")
    policies.add("hold", Record, {}, deps=["a"], on_dep_failure="hold")
    policies.insert()
    drain_queue("default", with_recursion=True)
    pending = Workflow("pending")
    pending.add("fetch", Plain, {"value": 1})
    sub = Workflow("encode")
    sub.add("small", Plain, {})
    pending.add_workflow("encode", sub, deps=["fetch"])
    pending.add("publish", Record, {}, deps=["fetch", "encode"])
    pending.insert()
    return {"chain": chain, "failed": failed, "policies": policies, "pending": pending,
            "sub": sub}


def test_workflows_table_lists_them_newest_first(flows):
    header, *lines = ops("workflows").splitlines()
    assert header.split() == ["ID", "NAME", "STATUS", "DONE", "FAILED", "INSERTED", "FINISHED",
                              "STEPS"]
    rows = {line.split()[0]: line for line in lines}
    order = [line.split()[0] for line in lines]
    assert order == [flows[key].hex_id for key in ("sub", "pending", "policies", "failed",
                                                   "chain")]
    assert rows[flows["chain"].hex_id].split()[1:5] == ["chain", "completed", "3/3", "0"]
    assert rows[flows["chain"].hex_id].endswith("3 completed")
    # FAILED counts the steps that ended dead or cancelled.
    assert rows[flows["failed"].hex_id].split()[1:5] == ["retry-me", "failed", "3/3", "3"]
    assert rows[flows["failed"].hex_id].endswith("1 dead, 2 cancelled")
    policies = rows[flows["policies"].hex_id]
    assert policies.split()[1:5] == ["policies", "running", "3/4", "1"]
    assert policies.endswith("2 completed, 1 held, 1 dead")
    pending = rows[flows["pending"].hex_id]
    assert pending.split()[1:5] == ["pending", "running", "0/2", "0"]
    assert pending.endswith("1 available, 1 waiting") and " - " in pending  # not finished
    # Columns are aligned: every row starts its third column at the same place.
    assert len({line.index(" " + line.split()[2] + " ") for line in [header, *lines]}) == 1


def test_workflows_json_has_states_and_counts(flows):
    data = {item["id"]: item for item in ops_json("workflows")["workflows"]}
    assert len(data) == 5
    policies = data[flows["policies"].hex_id]
    assert policies["status"] == "running" and policies["finished_at"] is None
    assert policies["counts"] == {"completed": 2, "held": 1, "dead": 1}
    assert (policies["steps_total"], policies["steps_done"], policies["steps_failed"],
            policies["steps_unfinished"]) == (4, 3, 1, 1)
    chain = data[flows["chain"].hex_id]
    assert chain["status"] == "completed" and chain["counts"] == {"completed": 3}
    assert chain["finished_at"] >= chain["inserted_at"]
    assert data[flows["failed"].hex_id]["counts"] == {"dead": 1, "cancelled": 2}
    assert data[flows["sub"].hex_id]["parent_workflow_id"] == flows["pending"].hex_id
    assert data[flows["sub"].hex_id]["counts"] == {"waiting": 1}
    assert "steps" not in chain and "sub_workflows" not in chain  # a list reads neither


@pytest.mark.parametrize("args, expected", [
    (("--status", "failed"), ["failed"]),
    (("--status", "completed"), ["chain"]),
    (("--status", "cancelled"), []),
    (("--status", "running"), ["sub", "pending", "policies"]),
    (("--name", "policies"), ["policies"]),
    (("--name", "polic"), []),  # exact names only
    (("--status", "completed", "--name", "policies"), []),
    (("--limit", "2"), ["sub", "pending"]),
    (("--status", "running", "--limit", "1"), ["sub"]),
])
def test_workflows_filters(flows, args, expected):
    found = [item["id"] for item in ops_json("workflows", *args)["workflows"]]
    assert found == [flows[key].hex_id for key in expected]


def test_workflows_on_an_empty_table():
    assert ops("workflows").splitlines()[1:] == ["(none)"]
    assert ops_json("workflows") == {"workflows": []}


def test_workflow_json_has_the_steps(flows):
    data = ops_json("workflow", flows["policies"].hex_id)
    workflow, steps = data["workflow"], {item["name"]: item for item in data["steps"]}
    assert workflow["name"] == "policies" and workflow["status"] == "running"
    assert workflow["counts"] == {"completed": 2, "held": 1, "dead": 1}
    assert workflow["steps_done"] == 3 and workflow["sub_workflows"] == []
    assert {name: item["state"] for name, item in steps.items()} == {
        "a": "dead", "ok": "completed", "run": "completed", "hold": "held"}
    assert sorted(steps["run"]["deps"]) == ["a", "ok"] and steps["a"]["deps"] == []
    assert steps["hold"]["on_dep_failure"] == "hold"
    assert steps["hold"]["id"] == step(flows["policies"], "hold").id.hex
    assert steps["a"]["attempts"] == 1 and steps["a"]["worker"] == "tests.workflows.steps.Fail"
    assert steps["hold"]["started_at"] is None and steps["ok"]["completed_at"] is not None
    pending = ops_json("workflow", flows["pending"].hex_id)
    assert pending["workflow"]["sub_workflows"] == [flows["sub"].hex_id]
    assert {item["name"]: item["deps"] for item in pending["steps"]} == {
        "fetch": [], "publish": ["fetch", "encode"]}
    sub = ops_json("workflow", flows["sub"].hex_id)
    assert sub["workflow"]["parent_workflow_id"] == flows["pending"].hex_id
    assert [item["state"] for item in sub["steps"]] == ["waiting"]


def test_workflow_table_shows_fields_steps_and_what_to_do(flows):
    text = ops("workflow", flows["policies"].hex_id)
    fields, _, steps = text.partition("\nsteps:\n")
    assert f"id               {flows['policies'].hex_id}" in fields
    assert "status           running" in fields
    assert "steps            3/4 done, 1 failed" in fields
    assert "step_states      2 completed, 1 held, 1 dead" in fields
    assert "finished_at      -" in fields
    header, *lines = steps.splitlines()
    assert header.split() == ["ID", "STEP", "STATE", "WORKER", "QUEUE", "DEPS", "ATTEMPTS",
                              "STARTED", "FINISHED"]
    rows = {line.split()[1]: line.split() for line in lines[:4]}
    assert rows["hold"][2:6] == ["held", "tests.workflows.steps.Record", "default", "a"]
    assert rows["run"][2] == "completed" and rows["run"][5:7] == ["a,", "ok"]
    held = step(flows["policies"], "hold").id.hex
    assert f"`manage.py kathikon_ops release {held}`" in text
    assert f"`manage.py kathikon_ops retry {step(flows['policies'], 'a').id.hex}`" in text


@pytest.mark.parametrize("args, message", [
    (("workflow", "0" * 32), "no workflow with id 0000"),
    (("workflow", "nonsense"), "no workflow with id 'nonsense'"),
    (("workflow-cancel", "f" * 32), "no workflow with id ffff"),
    (("release", "0" * 32), "no job with id"),
    (("workflows", "--status", "bogus"), "invalid choice: 'bogus'"),
    (("workflows", "--status", "waiting"), "invalid choice: 'waiting'"),  # a step's state
    (("workflows", "--limit", "0"), "not an int from 1 to 1000"),
    (("workflows", "--limit", str(10**30)), "not an int from 1 to 1000"),
    (("workflows", "--limit", "many"), "invalid page_size value"),
])
def test_bad_input_is_a_command_error(args, message):
    with pytest.raises(CommandError, match=message) as refused:
        ops(*args)
    assert refused.value.returncode == 1  # the exit code of `show` for an unknown job


def test_workflow_cancel(flows):
    pending = flows["pending"]
    out = ops("workflow-cancel", pending.hex_id)
    assert out.strip() == (f"cancelled workflow {pending.hex_id} (pending): cancelled; "
                           "steps: 2 cancelled")
    assert WorkflowRow.objects.get(pk=pending.id).status == "cancelled"
    assert WorkflowRow.objects.get(pk=flows["sub"].id).status == "cancelled"
    assert set(kathikon.Job.objects.filter(workflow_id=flows["sub"].id)
               .values_list("state", flat=True)) == {"cancelled"}
    with pytest.raises(CommandError, match="is already cancelled"):
        ops("workflow-cancel", pending.hex_id)
    with pytest.raises(CommandError, match="is already completed"):
        ops("workflow-cancel", flows["chain"].hex_id)
    data = ops_json("workflow-cancel", flows["policies"].hex_id)  # its held step
    assert data["workflow"]["status"] == "cancelled"
    assert data["workflow"]["counts"] == {"completed": 2, "cancelled": 1, "dead": 1}
    history = ops_json("show", step(flows["policies"], "hold").id.hex)["history"]
    assert history[-1]["event"] == "cancelled" and history[-1]["actor"] == "kathikon_ops"


def test_a_cancelled_workflow_is_cancelling_until_its_running_step_finishes(flows):
    pending = flows["pending"]
    [running] = storage.claim_jobs("default", 10, "node-1")  # "fetch": the one available step
    assert running.step == "fetch"
    ops("workflow-cancel", pending.hex_id)
    row = next(line for line in ops("workflows").splitlines() if line.startswith(pending.hex_id))
    assert row.split()[2:4] == ["cancelling", "1/2"]  # publish cancelled, fetch runs
    data = ops_json("workflow", pending.hex_id)["workflow"]
    assert data["status"] == "running" and data["cancelled_at"] is not None
    assert data["counts"] == {"running": 1, "cancelled": 1}
    assert "status           cancelling" in ops("workflow", pending.hex_id)
    drain_queue("default")  # nothing left to claim: the running step is not touched
    assert kathikon.fetch(running.id).state == "running"


def test_cancel_of_a_held_step_finishes_its_workflow(flows):
    held = step(flows["policies"], "hold")
    assert ops("cancel", held.id.hex).strip() == f"cancelled {held.id.hex}"
    data = ops_json("workflow", flows["policies"].hex_id)["workflow"]
    assert data["status"] == "failed" and data["counts"] == {
        "completed": 2, "dead": 1, "cancelled": 1}


def test_release_runs_a_held_step(flows):
    held, waiting = step(flows["policies"], "hold"), step(flows["pending"], "publish")
    with pytest.raises(CommandError, match="is waiting; only a held step can be released"):
        ops("release", waiting.id.hex, "--json")
    assert kathikon.fetch(waiting.id).state == "waiting"
    assert ops("release", held.id.hex).strip() == f"released {held.id.hex} (step hold): available"
    drain_queue("default", with_recursion=True)
    assert kathikon.fetch(held.id).state == "completed"
    assert ops_json("workflow", flows["policies"].hex_id)["workflow"]["status"] == "failed"
    with pytest.raises(CommandError, match="is completed; only a held step can be released"):
        ops("release", held.id.hex)


def test_the_workflow_actions_obey_allow_destructive_actions(flows):
    held = step(flows["policies"], "hold")
    with override_settings(KATHIKON={"QUEUES": {"default": {}},
                                     "ALLOW_DESTRUCTIVE_ACTIONS": False}):
        with pytest.raises(CommandError, match="destructive actions are disabled"):
            ops("workflow-cancel", flows["pending"].hex_id)
        with pytest.raises(CommandError, match="destructive actions are disabled"):
            ops("release", held.id.hex)
        assert ops_json("workflows")["workflows"] and ops("workflow", flows["pending"].hex_id)
    assert kathikon.fetch(held.id).state == "held"
    assert WorkflowRow.objects.get(pk=flows["pending"].id).status == "running"


def test_summary_and_jobs_show_waiting_and_held_steps(flows):
    header, *lines = ops("summary").splitlines()
    columns = header.split()
    assert columns[3:7] == ["AVAILABLE", "SCHEDULED", "WAIT/HELD", "EXECUTING"]
    default = next(line.split() for line in lines if line.startswith("default "))
    assert default[3:6] == ["1", "0", "2/1"]  # fetch available; publish, small waiting; hold
    line = next(line for line in lines if line.startswith("default "))
    assert line.index(" 2/1 ") == header.index(" WAIT/HELD ")  # aligned under its header
    counts = next(row for row in ops_json("summary") if row["name"] == "default")["counts"]
    assert (counts["waiting"], counts["held"]) == (2, 1)
    assert [job["id"] for job in ops_json("jobs", "--state", "held")["jobs"]] == [
        step(flows["policies"], "hold").id.hex]
    assert len(ops_json("jobs", "--state", "waiting")["jobs"]) == 2


@pytest.mark.parametrize("name", ["a\x00b", "", "x" * 201, "tab\there"])
def test_a_name_no_workflow_can_have_is_refused(name):
    """Not an empty list (a typo would look like "none yet"); PostgreSQL refuses NUL."""
    with pytest.raises(CommandError, match="a workflow's name is 1-200 printable characters"):
        ops("workflows", "--name", name)


def test_real_process_exit_codes(flows):
    env = {**os.environ, "KATHIKON_DB_NAME": connection.settings_dict["NAME"],
           "PYTHONPATH": str(ROOT)}
    manage = [sys.executable, str(ROOT / "testproject" / "manage.py"), "kathikon_ops"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*manage, *args], env=env, capture_output=True, text=True,
                              timeout=60, cwd=ROOT)

    ok = run("workflow", flows["chain"].hex_id, "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["workflow"]["status"] == "completed"
    missing = run("workflow", "0" * 32)
    assert missing.returncode == 1 and "no workflow with id" in missing.stderr
    bad = run("workflows", "--status", "bogus")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


OPS_SCRIPT = """
import json
from io import StringIO
from django.core.management import call_command
from django.core.management.base import CommandError

seen = {}
for args in (["workflows"], ["workflows", "--json", "--status", "failed"],
             ["workflow", "f" * 32], ["workflow-cancel", "f" * 32], ["release", "f" * 32],
             ["summary"]):
    try:
        call_command("kathikon_ops", *args, stdout=StringIO(), stderr=StringIO())
        seen[" ".join(args)] = "no error"
    except CommandError as exc:
        seen[" ".join(args)] = [exc.returncode, str(exc)]
print("SEEN " + json.dumps(seen))
"""


def test_every_workflow_command_says_to_migrate(empty_database, tmp_path):  # noqa: F811
    seen = seen_by(OPS_SCRIPT, empty_database, tmp_path)
    assert len(seen) == 6, seen
    for command, outcome in seen.items():
        assert outcome != "no error", command
        code, message = outcome
        assert code == NotMigrated.exit_code, (command, message)
        assert "run `python manage.py migrate`" in message, (command, message)
