"""A step's name lives in kathikon_workflowstep: written with the step, gone with its job."""

from __future__ import annotations

import datetime as dt

import pytest

import kathikon
from kathikon import Workflow
from kathikon.models import Workflow as WorkflowRow
from kathikon.models import WorkflowStep
from kathikon.storage import jobs as job_storage
from kathikon.storage import vendor
from kathikon.storage import workflows as store
from kathikon.testing import drain_queue
from tests.workflows.steps import Plain, Record

pytestmark = pytest.mark.django_db(transaction=True)


def names(wf: Workflow) -> dict[str, str]:
    return {row.step: row.job_id.hex for row in WorkflowStep.objects.filter(workflow_id=wf.id)}


def test_every_step_is_named_once_and_its_workflow_lists_it():
    wf = Workflow("named")
    wf.add("a", Plain, {"value": 1})
    wf.add("b", Plain, {"value": 2}, deps=["a"])
    wf.add("c", Record, {}, deps=["a", "b"])
    wf.insert()
    steps = {job.step: job.id.hex for job in kathikon.Job.objects.filter(workflow_id=wf.id)}
    assert names(wf) == steps and len(steps) == 3
    assert [job.step for job in store.workflow_steps(wf.id)] == ["a", "b", "c"]
    assert store.count_steps([wf.id]) == {wf.id: {"available": 1, "waiting": 2}}


def test_a_name_another_append_took_meanwhile_refuses_the_whole_append(monkeypatch):
    wf = Workflow("race")
    wf.add("a", Plain, {"value": 1})
    wf.insert()
    loaded = Workflow.load(wf.id)
    # The append's own check read the names before the other append committed: only the
    # table's unique constraint can tell.
    monkeypatch.setattr(store, "find_steps", lambda workflow_id, wanted: {})
    jobs_before = kathikon.Job.objects.count()
    with pytest.raises(kathikon.InvalidWorkflow, match="used twice"):
        loaded.append("a", Plain, {"value": 2})
    assert kathikon.Job.objects.count() == jobs_before
    row = WorkflowRow.objects.get(pk=wf.id)
    assert (row.steps_total, row.steps_unfinished) == (1, 1)
    assert list(names(wf)) == ["a"]


def test_names_go_with_their_jobs_and_then_the_workflow_is_pruned():
    wf = Workflow("pruned")
    wf.add("a", Plain, {"value": 1})
    wf.add("b", Plain, {"value": 2}, deps=["a"])
    wf.insert()
    drain_queue("default", with_recursion=True)
    assert WorkflowRow.objects.get(pk=wf.id).status == "completed"
    later = vendor.now() + dt.timedelta(days=1)
    assert store.prune_workflows(later) == 0  # its steps are still there
    assert job_storage.prune_jobs(later) == 2
    assert names(wf) == {}
    assert store.prune_workflows(later) == 1
    assert not WorkflowRow.objects.filter(pk=wf.id).exists()


def test_a_deleted_step_frees_its_name():
    wf = Workflow("deleted")
    wf.add("a", Plain, {"value": 1})
    wf.insert()
    drain_queue("default", with_recursion=True)
    job_storage.delete_job(kathikon.Job.objects.get(workflow_id=wf.id, step="a").id)
    assert names(wf) == {}
