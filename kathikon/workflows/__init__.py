"""Workflows: jobs that depend on jobs — fan-out, fan-in and results passed downstream.

    from kathikon import Workflow

    wf = Workflow("publish-video")
    wf.add("fetch", FetchVideo, {"url": url})
    for size in ("small", "medium", "large"):
        wf.add(size, Transcode, {"size": size}, deps=["fetch"])
    wf.add("publish", Publish, {}, deps=["small", "medium", "large"])
    wf.add("notify", Notify, {}, deps=["publish"], on_dep_failure="run")
    wf.insert()          # one transaction; inside yours when there is one

    class Publish(kathikon.Worker):
        def perform(self, job):
            sizes = job.dep_results()            # {"small": ..., "medium": ..., "large": ...}
            url = job.dep_result("small")["url"]

A step is a job with a name. It is ``waiting`` until every dependency has
settled (completed, dead or cancelled); the transaction that settles the last
one releases it (``available``), so a fan-in of any width runs once, after all
of its deps, whatever the number of processes acking at once. A failed
dependency (dead or cancelled) triggers the step's ``on_dep_failure``:
``"cancel"`` (default; at once, and on down the graph), ``"run"`` (run once
every dep has settled) or ``"hold"`` (state ``held`` until a person releases or
cancels it). Retrying a failed step (``kathikon.retry``, the admin) continues
the workflow: the steps its failure cancelled wait for it again.

Dependencies: a step name of this workflow, a sub-workflow added with
``add_workflow`` (the step waits for all of it), ``other.step("name")`` or a
step's ``Job`` of another workflow, or a whole inserted ``Workflow``. Steps are
added to a running workflow with ``Workflow.load(id).append(...)`` (or ``add``
then ``insert`` on the inserted builder).

Reads and actions: ``fetch(id)``, ``list_workflows()``, ``cancel(id)`` (every
step not started), ``release(job_id)`` (a held step). Errors:
``InvalidWorkflow`` (a cycle, an unknown dependency, a name used twice: nothing
is written), ``InvalidJob`` (a bad step), ``WorkflowFinished``,
``WorkflowNotFound``. Signals: ``workflow_started``, ``step_released``,
``workflow_finished``.
"""

from __future__ import annotations

from kathikon.storage.workflows import MAX_DEPENDENTS
from kathikon.workflows.builder import StepRef, Workflow
from kathikon.workflows.graph import MAX_STEPS
from kathikon.workflows.ops import (
    StepInfo,
    WorkflowInfo,
    cancel,
    fetch,
    list_workflows,
    release,
)

__all__ = ["MAX_DEPENDENTS", "MAX_STEPS", "StepInfo", "StepRef", "Workflow", "WorkflowInfo",
           "cancel", "fetch", "list_workflows", "release"]
