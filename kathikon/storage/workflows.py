"""Internal: workflow rows and their edges — insert, append, cancel, release, read.

Every write here runs in one transaction (inside the caller's, as a savepoint,
when there is one) and locks in the order of kathikon.storage.settle: job rows
first (in id order), then workflow rows (in id order).

A dependency outside the rows being inserted (a step of another workflow, a
whole workflow, a step appended to later) is locked before its state is read:
the lock waits for a transaction that is settling it, and the read then sees
its outcome, so a new step never waits on a dependency that has already
settled and never misses one that settles while it is inserted.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError
from django.db.models import Count, Exists, F, OuterRef, QuerySet

from kathikon.exceptions import InvalidState, InvalidWorkflow, WorkflowFinished, WorkflowNotFound
from kathikon.ids import parse_id
from kathikon.jobspec import JobRow
from kathikon.models import Job, Workflow, WorkflowDep, WorkflowStep
from kathikon.states import PENDING_STATES, TERMINAL_STATES, JobState
from kathikon.storage import notify, prepared, vendor
from kathikon.storage.events import record_event, record_events
from kathikon.storage.inserts import insert_jobs
from kathikon.storage.literals import uuid_array
from kathikon.storage.schema import explain_missing_schema
from kathikon.storage.settle import (
    CANCEL,
    FAILED_STATES,
    Member,
    Settled,
    evaluate,
    settle,
)
from kathikon.storage.uniques import key_after

#: At most this many steps wait on one step or one workflow, over every insert and append:
#: when it settles, its dependents are counted and released in the transaction of its ack
#: (100,000 in about 1.3 s on two cores). Without a bound, appends could grow one step's
#: fan-out until that transaction outlives ``RESCUE_AFTER``: the worker exits, the rescued
#: step runs again and its ack does the same again, until it is dead and its dependents are
#: cancelled.
MAX_DEPENDENTS = 100_000


@dataclass(frozen=True, slots=True)
class DepRef:
    """One dependency of a step: a row of this insert, a job, or a workflow."""

    name: str
    job_id: uuid.UUID | None = None
    workflow_id: uuid.UUID | None = None


@dataclass(slots=True)
class Plan:
    """What a workflow insert or append writes (built and validated by kathikon.workflows)."""

    workflows: list[Workflow]  # new rows: the workflow and its sub-workflows, parents first
    rows: list[JobRow]  # the steps, workflow_id and step set; state and counters set here
    deps: dict[uuid.UUID, list[DepRef]] = field(default_factory=dict)  # row id → its deps
    append_to: uuid.UUID | None = None  # an existing workflow that gets the new members


@dataclass(slots=True)
class Inserted:
    """What :func:`insert_workflow` wrote, for the caller's signals."""

    workflows: list[Workflow]
    rows: list[JobRow]
    settled: Settled


def workflow_pk(workflow_id: object) -> uuid.UUID:
    pk = parse_id(getattr(workflow_id, "pk", getattr(workflow_id, "id", workflow_id)))
    if pk is None:
        raise WorkflowNotFound(f"no workflow with id {workflow_id!r} (ids are hex strings)")
    return pk


def workflows() -> Any:
    return Workflow.objects.using(vendor.alias())


def _jobs() -> Any:
    return Job.objects.using(vendor.alias())


def _deps() -> Any:
    return WorkflowDep.objects.using(vendor.alias())


def _names() -> Any:
    return WorkflowStep.objects.using(vendor.alias())


def step_ids(workflow_ids: uuid.UUID | Iterable[uuid.UUID], *,
             using: str | None = None) -> QuerySet[WorkflowStep, Any]:
    """The ids of these workflows' steps, as a subquery: ``Job.objects.filter(id__in=…)``
    reads a workflow's steps by primary key (the job table has no index on its workflow)."""
    ids = [workflow_ids] if isinstance(workflow_ids, uuid.UUID) else list(workflow_ids)
    names = WorkflowStep.objects.using(using or vendor.alias())
    query = names.filter(workflow_id=ids[0]) if len(ids) == 1 else names.filter(
        workflow_id__in=ids)
    return query.values("job_id")


def steps_of(workflow_ids: uuid.UUID | Iterable[uuid.UUID], *,
             using: str | None = None) -> QuerySet[Job]:
    """The steps of these workflows (any state)."""
    using = using or vendor.alias()
    return Job.objects.using(using).filter(id__in=step_ids(workflow_ids, using=using))


def fetch_workflow(workflow_id: object) -> Workflow:
    pk = workflow_pk(workflow_id)
    row = workflows().filter(pk=pk).first()
    if row is None:
        raise WorkflowNotFound(f"no workflow with id {pk.hex}")
    return row


# -- insert and append ----------------------------------------------------------------------


def insert_workflow(plan: Plan) -> Inserted:
    """Write ``plan`` in one transaction; ``InvalidWorkflow`` or ``WorkflowFinished`` write
    nothing (a savepoint inside the caller's transaction, which stays usable)."""
    try:
        return _insert(plan)
    except IntegrityError as exc:
        if WorkflowStep._meta.db_table not in str(exc) and "kathikon_step_name" not in str(exc):
            raise
        # Two appends of one name at once: the second one's names clash (the check before
        # the insert read the workflow's names before the first one committed).
        raise InvalidWorkflow("a step name is used twice in the workflow (appended by "
                              "another transaction meanwhile); nothing was inserted") from exc


def _insert(plan: Plan) -> Inserted:
    with explain_missing_schema(), vendor.atomic():
        now = vendor.now()
        jobs, finished = _lock_outside(plan)
        new_rows = {row.id for row in plan.rows}
        new_workflows = {workflow.id for workflow in plan.workflows}
        _check_fan_out(plan, new_rows | new_workflows)
        decide: list[uuid.UUID] = []
        for row in plan.rows:
            waiting = failed = 0
            for dep in plan.deps.get(row.id, []):
                if dep.job_id in new_rows or dep.workflow_id in new_workflows:
                    waiting += 1
                elif dep.job_id is not None:
                    state = jobs[dep.job_id]
                    waiting += state not in TERMINAL_STATES
                    failed += state in FAILED_STATES
                else:
                    status = finished.get(dep.workflow_id)  # type: ignore[arg-type]
                    waiting += status is None
                    failed += status not in (None, Workflow.Status.COMPLETED)
            row.deps_waiting, row.deps_failed = waiting, failed
            if waiting or failed:
                if not waiting or (failed and (row.on_dep_failure or CANCEL) == CANCEL):
                    decide.append(row.id)  # decided now: released, held or cancelled
                row.state = JobState.WAITING
        _count_members(plan, now)
        ids = insert_jobs(plan.rows)
        _check_unique(plan.rows, ids)
        _name_steps(plan.rows)
        _deps().bulk_create(
            [WorkflowDep(job_id=row_id, dep_job_id=dep.job_id, dep_workflow_id=dep.workflow_id,
                         name=dep.name)
             for row_id, deps in plan.deps.items() for dep in deps], batch_size=1000)
        settled = evaluate(decide, now=now) if decide else Settled()
    return Inserted(plan.workflows, plan.rows, settled)


def _lock_outside(plan: Plan) -> tuple[dict[uuid.UUID, str], dict[uuid.UUID, str]]:
    """Lock the jobs and workflows the plan depends on or appends to; their states.

    Returns ``({job id: state}, {workflow id: status of a finished one})``.
    """
    new_rows = {row.id for row in plan.rows}
    new_workflows = {workflow.id for workflow in plan.workflows}
    job_ids = sorted({dep.job_id for deps in plan.deps.values() for dep in deps
                      if dep.job_id is not None and dep.job_id not in new_rows})
    jobs: dict[uuid.UUID, str] = {}
    for pk, state, workflow_id in (_jobs().select_for_update().filter(id__in=job_ids)
                                   .order_by("id").values_list("id", "state", "workflow_id")):
        if workflow_id is None:
            raise InvalidWorkflow(f"job {pk.hex} is not a workflow step; only steps (and "
                                  "whole workflows) can be dependencies")
        jobs[pk] = state
    missing = [pk for pk in job_ids if pk not in jobs]
    if missing:
        raise InvalidWorkflow(f"dependency: no job with id {missing[0].hex}")
    workflow_ids = {dep.workflow_id for deps in plan.deps.values() for dep in deps
                    if dep.workflow_id is not None and dep.workflow_id not in new_workflows}
    if plan.append_to is not None:
        workflow_ids.add(plan.append_to)
    locked = {row.id: row for row in workflows().select_for_update()
              .filter(pk__in=sorted(workflow_ids)).order_by("id")}
    for pk in sorted(workflow_ids):
        if pk not in locked:
            raise WorkflowNotFound(f"no workflow with id {pk.hex}")
    if plan.append_to is not None:
        target = locked[plan.append_to]
        if target.status != Workflow.Status.RUNNING or target.cancelled_at is not None:
            raise WorkflowFinished(f"workflow {target.name!r} ({target.id.hex}) is "
                                   f"{'cancelled' if target.cancelled_at else target.status}; "
                                   "it takes no more steps")
    finished = {pk: row.status for pk, row in locked.items()
                if row.status != Workflow.Status.RUNNING}
    return jobs, finished


def _check_fan_out(plan: Plan, new: set[uuid.UUID]) -> None:
    """Refuse the plan if a step or workflow would have more than :data:`MAX_DEPENDENTS`
    dependents, counting those it has already (an outside dependency is locked by now, so
    no other insert adds to it meanwhile)."""
    total: Counter[uuid.UUID] = Counter()
    names: dict[uuid.UUID, str] = {}
    outside: dict[str, set[uuid.UUID]] = {"dep_job_id": set(), "dep_workflow_id": set()}
    for deps in plan.deps.values():
        for dep in deps:
            key = dep.job_id or dep.workflow_id
            if key is None:
                continue
            total[key] += 1
            names.setdefault(key, dep.name)
            if key not in new:
                outside["dep_job_id" if dep.job_id else "dep_workflow_id"].add(key)
    for column, ids in outside.items():
        if ids:
            total.update(dict(_deps().filter(**{f"{column}__in": sorted(ids)}).order_by()
                              .values_list(column).annotate(n=Count("pk"))))
    for key, count in total.items():
        if count > MAX_DEPENDENTS:
            raise InvalidWorkflow(
                f"dependency {names[key]!r} ({key.hex}) would have {count:,} steps waiting on "
                f"it; at most {MAX_DEPENDENTS:,}, since its dependents are released in the "
                "transaction of its ack: fan out through intermediate steps or sub-workflows. "
                "Nothing was inserted")


def _count_members(plan: Plan, now: dt.datetime) -> None:
    """Each workflow counts its new steps and sub-workflows as unfinished members."""
    steps = Counter(row.workflow_id for row in plan.rows)
    members = Counter(steps)
    for workflow in plan.workflows:
        if workflow.parent_workflow_id is not None:
            members[workflow.parent_workflow_id] += 1
    for workflow in plan.workflows:
        workflow.inserted_at = now
        workflow.steps_total = steps[workflow.id]
        workflow.steps_unfinished = members[workflow.id]
        if not workflow.steps_unfinished:
            raise InvalidWorkflow(f"workflow {workflow.name!r} has no steps")
    workflows().bulk_create(plan.workflows)
    if plan.append_to is not None:
        workflows().filter(pk=plan.append_to).update(
            steps_unfinished=F("steps_unfinished") + members[plan.append_to],
            steps_total=F("steps_total") + steps[plan.append_to])


_PG_NAME_STEPS = """
INSERT INTO kathikon_workflowstep (job_id, workflow_id, step)
SELECT * FROM unnest(%s::uuid[], %s::uuid[], %s::text[])
"""
_NAME_CHUNK = 10_000  # steps per statement (PostgreSQL; elsewhere bulk_create's batches)


def _name_steps(rows: Sequence[JobRow]) -> None:
    """One kathikon_workflowstep row per step: its name, unique in its workflow."""
    steps = [(row.id, row.workflow_id, row.step or "") for row in rows
             if row.workflow_id is not None]
    if not vendor.is_postgres():
        _names().bulk_create([WorkflowStep(job_id=pk, workflow_id=workflow_id, step=step)
                              for pk, workflow_id, step in steps], batch_size=300)
        return
    with prepared.cursor() as cursor:
        for start in range(0, len(steps), _NAME_CHUNK):
            chunk = steps[start:start + _NAME_CHUNK]
            # ids as array literals (kathikon.storage.literals); names may need quoting,
            # so they go as a list.
            cursor.execute(_PG_NAME_STEPS, [
                uuid_array([pk for pk, _, _ in chunk]),
                uuid_array([workflow_id for _, workflow_id, _ in chunk]),
                [step for _, _, step in chunk]])


def _check_unique(rows: Sequence[JobRow], ids: list[uuid.UUID]) -> None:
    """A unique step whose key another job holds refuses the whole insert; the keyed
    rows went in through the unique path, which writes no workflow columns: add them."""
    for row, pk in zip(rows, ids, strict=True):
        if row.unique_key is None:
            continue
        if pk != row.id:
            raise InvalidWorkflow(f"step {row.step!r}: its unique key is held by job "
                                  f"{pk.hex}; nothing was inserted", step=row.step)
        _jobs().filter(pk=pk).update(
            workflow_id=row.workflow_id, step=row.step, deps_waiting=row.deps_waiting,
            deps_failed=row.deps_failed, on_dep_failure=row.on_dep_failure, state=row.state,
            unique_key=key_after(row.state))


# -- people's actions -----------------------------------------------------------------------


def cancel_workflow(workflow_id: object, *, actor: str = "") -> tuple[Workflow, list[uuid.UUID],
                                                                      Settled]:
    """Cancel every step not yet started, of the workflow and its sub-workflows.

    Running steps finish; what waits on them is cancelled already. Returns the
    workflow, the ids cancelled here and what settling them changed.
    """
    with vendor.atomic():
        root = fetch_workflow(workflow_id)
        tree = _tree(root.id)
        now = vendor.now()
        # Lock order (kathikon.storage.settle): the steps, then what settling them locks
        # (steps waiting on them, then workflows), and only then this tree's workflow rows.
        rows = list(_jobs().select_for_update().filter(
            id__in=step_ids(tree), state__in=PENDING_STATES).order_by("id")
            .values_list("id", "workflow_id"))
        if not workflows().filter(pk__in=tree, status=Workflow.Status.RUNNING,
                                  cancelled_at__isnull=True).exists():
            raise WorkflowFinished(f"workflow {root.name!r} ({root.id.hex}) is already "
                                   f"{'cancelled' if root.cancelled_at else root.status}")
        ids = [pk for pk, _ in rows]
        for start in range(0, len(ids), 1000):
            _jobs().filter(id__in=ids[start:start + 1000], state__in=PENDING_STATES).update(
                state=JobState.CANCELLED, cancelled_at=now, completed_at=now,
                unique_key=key_after(JobState.CANCELLED))
        record_events(ids, "cancelled", actor=actor, workflow=root.id.hex)
        settled = settle([Member(pk, parent, True) for pk, parent in rows], now=now)
        # A workflow of the tree that finished just now finished because it was cancelled;
        # the others are marked, and say cancelled once their running steps have finished.
        ended = [workflow for workflow in settled.finished if workflow.id in set(tree)]
        for workflow in ended:
            workflow.status, workflow.cancelled_at = Workflow.Status.CANCELLED, now
        if ended:
            workflows().filter(pk__in=[workflow.id for workflow in ended]).update(
                status=Workflow.Status.CANCELLED, cancelled_at=now)
        list(workflows().select_for_update().filter(pk__in=tree).order_by("id")
             .values_list("id", flat=True))
        workflows().filter(pk__in=tree, status=Workflow.Status.RUNNING,
                           cancelled_at__isnull=True).update(cancelled_at=now)
    return fetch_workflow(root.id), ids, settled


def _tree(root: uuid.UUID) -> list[uuid.UUID]:
    """The workflow and its sub-workflows, however deep."""
    found, level = [root], [root]
    while level:
        level = list(workflows().filter(parent_workflow_id__in=level)
                     .values_list("id", flat=True))
        found += level
    return found


def release_step(job_id: object, *, actor: str = "") -> tuple[Job, Settled]:
    """A held step runs now (a person decided its failed dependency does not matter)."""
    from kathikon.storage.jobs import fetch_job

    with vendor.atomic():
        job = fetch_job(job_id, lock=True)
        if job.state != JobState.HELD:
            raise InvalidState(f"job {job.id.hex} is {job.state}; only a held step can be "
                               "released", state=job.state)
        now = vendor.now()
        _jobs().filter(pk=job.pk).update(state=JobState.AVAILABLE, available_at=now,
                                         unique_key=key_after(JobState.AVAILABLE))
        job.state, job.available_at = JobState.AVAILABLE, now
        record_event(job.id, "released", actor=actor, at=now)
        notify.notify(notify.AVAILABLE, [job.queue])
    settled = Settled()
    settled.released[job.workflow_id].append(  # type: ignore[index]
        (job.id.hex, job.step or ""))
    return job, settled


# -- reads ----------------------------------------------------------------------------------


def find_steps(workflow_id: uuid.UUID, names: Sequence[str]) -> dict[str, uuid.UUID]:
    """``{step name: job id}`` of the named steps of an inserted workflow."""
    return dict(_names().filter(workflow_id=workflow_id, step__in=list(names))
                .values_list("step", "job_id"))


def find_sub_workflows(parent_id: uuid.UUID, names: Sequence[str]) -> dict[str, uuid.UUID]:
    """``{name: workflow id}`` of the named sub-workflows of an inserted workflow."""
    return dict(workflows().filter(parent_workflow_id=parent_id, step__in=list(names))
                .values_list("step", "id"))


def dep_results(job: Job) -> dict[str, Any]:
    """``{name: result}`` of a step's dependencies: two queries (three with workflow deps)."""
    edges = list(_deps().filter(job_id=job.id).values_list("name", "dep_job_id",
                                                           "dep_workflow_id"))
    on_jobs = {pk for _, pk, _ in edges if pk is not None}
    on_workflows = {pk for _, _, pk in edges if pk is not None}
    results = dict(_jobs().filter(id__in=on_jobs).values_list("id", "result")) if on_jobs else {}
    steps: dict[uuid.UUID, dict[str, Any]] = defaultdict(dict)
    if on_workflows:
        for workflow_id, step, result in (steps_of(on_workflows)
                                          .values_list("workflow_id", "step", "result")):
            steps[workflow_id][step or ""] = result
    return {name: results.get(on_job) if on_job is not None else steps.get(on_workflow, {})
            for name, on_job, on_workflow in edges}


def jobs_by_ids(ids: Sequence[uuid.UUID]) -> list[Job]:
    found: list[Job] = []
    for start in range(0, len(ids), 1000):
        found += list(_jobs().filter(id__in=list(ids[start:start + 1000])).order_by("id"))
    return found


def workflow_steps(workflow_id: uuid.UUID) -> list[Job]:
    """The steps of one workflow, oldest first."""
    return list(steps_of(workflow_id).order_by("id"))


def workflow_edges(step_ids: Sequence[uuid.UUID]) -> list[WorkflowDep]:
    """The edges of these steps (what each waits on)."""
    edges: list[WorkflowDep] = []
    ids = list(step_ids)
    for start in range(0, len(ids), 1000):
        edges += list(_deps().filter(job_id__in=ids[start:start + 1000]).order_by("id"))
    return edges


def count_steps(workflow_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, dict[str, int]]:
    """``{workflow id: {state: count}}`` of their steps."""
    counts: dict[uuid.UUID, dict[str, int]] = defaultdict(dict)
    for row in (steps_of(workflow_ids).order_by()
                .values("workflow_id", "state").annotate(n=Count("id"))):
        counts[row["workflow_id"]][row["state"]] = row["n"]
    return counts


def list_workflows(*, status: str | None = None, name: str | None = None,
                   limit: int = 50) -> list[Workflow]:
    query = workflows()
    if status is not None:
        query = query.filter(status=status)
    if name is not None:
        query = query.filter(name=name)
    return list(query.order_by("-inserted_at", "-id")[:limit])


def prune_workflows(before: dt.datetime, *, limit: int = 1000) -> int:
    """Delete finished workflows older than ``before`` whose steps are all pruned."""
    with vendor.atomic():
        steps = _names().filter(workflow_id=OuterRef("pk"))  # deleted with their jobs
        ids = list(workflows().exclude(status=Workflow.Status.RUNNING)
                   .filter(finished_at__lt=before).exclude(Exists(steps))
                   .order_by("finished_at").values_list("id", flat=True)[:limit])
        if not ids:
            return 0
        _deps().filter(dep_workflow_id__in=ids).delete()
        return int(workflows().filter(pk__in=ids).delete()[0])


__all__ = ["MAX_DEPENDENTS", "DepRef", "Inserted", "Plan", "cancel_workflow", "count_steps",
           "dep_results", "fetch_workflow", "find_steps", "find_sub_workflows", "insert_workflow",
           "list_workflows", "prune_workflows", "release_step", "step_ids", "steps_of",
           "workflow_edges", "workflow_pk",
           "workflow_steps", "workflows"]
