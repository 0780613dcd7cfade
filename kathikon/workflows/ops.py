"""Internal: reading and acting on inserted workflows (the admin, ``kathikon_ops``, your code)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from kathikon.models import Job
from kathikon.models import Workflow as WorkflowRow
from kathikon.storage import workflows as store
from kathikon.workflows.announce import announce


@dataclass(frozen=True)
class StepInfo:
    """One step of a workflow snapshot."""

    id: str
    name: str
    state: str
    worker: str
    queue: str
    deps: list[str]  # names of what it waits for (steps, or other workflows)
    attempts: int
    inserted_at: dt.datetime | None
    started_at: dt.datetime | None
    completed_at: dt.datetime | None
    on_dep_failure: str


@dataclass(frozen=True)
class WorkflowInfo:
    """A workflow and its steps' states."""

    id: str
    name: str
    status: str
    parent_workflow_id: str | None
    steps_total: int
    steps_unfinished: int
    steps_failed: int
    inserted_at: dt.datetime
    finished_at: dt.datetime | None
    cancelled_at: dt.datetime | None
    counts: dict[str, int] = field(default_factory=dict)
    steps: list[StepInfo] = field(default_factory=list)
    sub_workflows: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def fetch(workflow_id: object, *, steps: bool = True) -> WorkflowInfo:
    """The workflow with counts of its steps by state (and each step: ``steps=True``)."""
    row = store.fetch_workflow(workflow_id)
    counts = store.count_steps([row.id]).get(row.id, {})
    infos: list[StepInfo] = []
    if steps:
        jobs = store.workflow_steps(row.id)
        infos = step_infos(jobs)
    subs = [pk.hex for pk in store.workflows().filter(parent_workflow_id=row.id)
            .order_by("inserted_at").values_list("id", flat=True)]
    return _info(row, counts, infos, subs)


def step_infos(jobs: list[Job]) -> list[StepInfo]:
    names: dict[Any, list[str]] = {}
    for edge in store.workflow_edges([job.id for job in jobs]):
        names.setdefault(edge.job_id, []).append(edge.name)
    return [StepInfo(id=job.id.hex, name=job.step or job.id.hex, state=job.state,
                     worker=job.worker, queue=job.queue, deps=names.get(job.id, []),
                     attempts=job.attempts, inserted_at=job.inserted_at,
                     started_at=job.started_at, completed_at=job.completed_at,
                     on_dep_failure=job.on_dep_failure or "cancel")
            for job in jobs]


def list_workflows(*, status: str | None = None, name: str | None = None,
                   limit: int = 50) -> list[WorkflowInfo]:
    """The newest workflows (of ``status``, named ``name``) with counts of steps by state."""
    rows = store.list_workflows(status=status, name=name, limit=limit)
    counts = store.count_steps([row.id for row in rows])
    return [_info(row, counts.get(row.id, {}), [], []) for row in rows]


def cancel(workflow_id: object, *, actor: str = "") -> WorkflowInfo:
    """Cancel every step of the workflow (and its sub-workflows) that has not started.

    Running steps finish; the steps waiting on them are cancelled already.
    ``WorkflowFinished`` when it has finished or was cancelled before.
    """
    row, cancelled, settled = store.cancel_workflow(workflow_id, actor=actor)
    settled.cancelled[:0] = cancelled  # job_cancelled for these too
    announce(settled)
    return fetch(row.id, steps=False)


def release(job_id: object, *, actor: str = "") -> Job:
    """Run a ``held`` step now: a person decided its failed dependency does not matter."""
    job, settled = store.release_step(job_id, actor=actor)
    announce(settled)
    return job


def _info(row: WorkflowRow, counts: dict[str, int], steps: list[StepInfo],
          subs: list[str]) -> WorkflowInfo:
    return WorkflowInfo(
        id=row.id.hex, name=row.name, status=row.status,
        parent_workflow_id=row.parent_workflow_id.hex if row.parent_workflow_id else None,
        steps_total=row.steps_total, steps_unfinished=row.steps_unfinished,
        steps_failed=row.steps_failed, inserted_at=row.inserted_at,
        finished_at=row.finished_at, cancelled_at=row.cancelled_at, counts=counts,
        steps=steps, sub_workflows=subs)
