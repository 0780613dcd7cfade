"""Workflows run in-process (kathikon.testing.drain_queue): release, policies, retry, append."""

from __future__ import annotations

import pytest

import kathikon
from kathikon import Workflow
from kathikon.models import Workflow as WorkflowRow
from kathikon.testing import drain_queue
from tests.workflows.steps import Fail, FailOnce, Plain, Record

pytestmark = pytest.mark.django_db(transaction=True)


def states(wf: Workflow) -> dict[str, str]:
    return {job.step: job.state for job in kathikon.Job.objects.filter(workflow_id=wf.id)}


def status(wf: Workflow) -> str:
    return WorkflowRow.objects.get(pk=wf.id).status


def test_a_chain_runs_in_order_and_passes_results():
    wf = Workflow("chain")
    wf.add("a", Plain, {"value": 1})
    wf.add("b", Plain, {"value": 2}, deps=["a"])
    wf.add("c", Record, {}, deps=["a", "b"])
    wf.insert()
    assert states(wf) == {"a": "available", "b": "waiting", "c": "waiting"}
    drain_queue("default", with_recursion=True)
    assert states(wf) == {"a": "completed", "b": "completed", "c": "completed"}
    c = kathikon.Job.objects.get(workflow_id=wf.id, step="c")
    assert c.result["deps"] == {"a": 1, "b": 2}
    assert status(wf) == "completed"


def test_a_failed_dep_cancels_down_the_graph_and_a_retry_continues_it():
    wf = Workflow("retry")
    wf.add("a", FailOnce)
    wf.add("b", Plain, {"value": 2}, deps=["a"])
    wf.add("c", Plain, {"value": 3}, deps=["b"])
    wf.insert()
    drain_queue("default", with_recursion=True)
    assert states(wf) == {"a": "dead", "b": "cancelled", "c": "cancelled"}
    assert status(wf) == "failed"
    a = kathikon.Job.objects.get(workflow_id=wf.id, step="a")
    kathikon.retry(a.id)
    assert states(wf) == {"a": "available", "b": "waiting", "c": "waiting"}
    assert status(wf) == "running"
    drain_queue("default", with_recursion=True)
    assert states(wf) == {"a": "completed", "b": "completed", "c": "completed"}
    assert status(wf) == "completed"


def test_run_and_hold_policies():
    wf = Workflow("policies")
    wf.add("a", Fail)
    wf.add("ok", Plain, {"value": 1})
    wf.add("run", Record, {}, deps=["a", "ok"], on_dep_failure="run")
    wf.add("hold", Record, {}, deps=["a"], on_dep_failure="hold")
    wf.insert()
    drain_queue("default", with_recursion=True)
    assert states(wf) == {"a": "dead", "ok": "completed", "run": "completed", "hold": "held"}
    assert status(wf) == "running"
    held = kathikon.Job.objects.get(workflow_id=wf.id, step="hold")
    kathikon.workflows.release(held.id)
    drain_queue("default", with_recursion=True)
    assert states(wf)["hold"] == "completed"
    assert status(wf) == "failed"


def test_cancel_and_append():
    wf = Workflow("cancel")
    wf.add("a", Plain, {"value": 1})
    wf.add("b", Plain, {}, deps=["a"])
    wf.insert()
    drain_queue("default", with_recursion=True)
    assert status(wf) == "completed"
    other = Workflow("running")
    other.add("a", Plain, {"value": 1})
    other.add("b", Plain, {}, deps=["a"])
    other.insert()
    other.append("c", Record, {}, deps=["a", wf.step("a")])
    assert states(other)["c"] == "waiting"
    kathikon.workflows.cancel(other.id)
    assert states(other) == {"a": "cancelled", "b": "cancelled", "c": "cancelled"}
    assert status(other) == "cancelled"
    with pytest.raises(kathikon.WorkflowFinished):
        other.append("d", Plain, {})


@pytest.mark.parametrize("build, message", [
    (lambda wf: (wf.add("a", Plain, deps=["b"]), wf.add("b", Plain, deps=["a"])), "cycle"),
    (lambda wf: wf.add("a", Plain, deps=["nope"]), "no step"),
    (lambda wf: (wf.add("a", Plain), wf.add("a", Plain)), "used twice"),
])
def test_bad_graphs_write_nothing(build, message):
    wf = Workflow("bad")
    with pytest.raises(kathikon.InvalidWorkflow, match=message):
        build(wf)
        wf.insert()
    assert not kathikon.Job.objects.exists()
    assert not WorkflowRow.objects.exists()
