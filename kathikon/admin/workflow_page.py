"""Internal: what a workflow's admin page shows — its steps, their edges, and the graph's
nodes (this workflow's steps, its sub-workflows, and what it waits for elsewhere).

Its reads are ORM reads of the columns the page shows, in a fixed number of queries
whatever the workflow's size; they would sit in kathikon.storage.workflows next to
``workflow_steps`` (whole rows) and ``workflow_edges`` (an IN list per 1,000 ids).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from django.db.models import OuterRef, QuerySet, Subquery
from django.urls import reverse
from django.utils.safestring import SafeString

from kathikon.admin.common import STATE_COLOURS, age, state_badge, when
from kathikon.admin.workflow_graph import Layout, Node, layout, render
from kathikon.ids import parse_id
from kathikon.models import Job, Workflow, WorkflowDep
from kathikon.states import JobState
from kathikon.storage import vendor
from kathikon.storage import workflows as store

#: The steps table lists at most this many steps; the job list, filtered, has them all.
STEP_ROWS = 200
#: A step's dependencies named in the table, then "+ N more".
DEP_NAMES = 6
#: Sub-workflows drawn and listed.
SUB_LIMIT = 100
#: A workflow's status on the same palette as the job states.
STATUS_COLOURS = {**STATE_COLOURS, "failed": STATE_COLOURS["dead"]}
#: The steps a person may retry from the page (a held step is released instead).
RETRYABLE = (JobState.DEAD, JobState.CANCELLED)


@dataclass(frozen=True)
class Step:
    """One step as the page shows it (the columns it needs, not the whole row)."""

    id: uuid.UUID
    name: str
    state: str
    worker: str
    queue: str
    attempts: int
    max_attempts: int
    started_at: dt.datetime | None
    completed_at: dt.datetime | None
    deps: tuple[str, ...] = ()
    more_deps: int = 0

    @property
    def badge(self) -> SafeString:
        return state_badge(self.state)

    @property
    def worker_name(self) -> str:
        return self.worker.rsplit(".", 1)[-1]

    @property
    def started(self) -> str:
        return when(self.started_at)

    @property
    def finished(self) -> str:
        return when(self.completed_at)

    @property
    def took(self) -> str:
        """From the last start to the finish (a retried step: its last attempt)."""
        if self.started_at and self.completed_at:
            return age(max(0.0, (self.completed_at - self.started_at).total_seconds()))
        return "—"


STEP_COLUMNS = ("id", "step", "state", "worker", "queue", "attempts", "max_attempts",
                "started_at", "completed_at")


@dataclass(frozen=True)
class Edge:
    job_id: uuid.UUID
    dep_job_id: uuid.UUID | None
    dep_workflow_id: uuid.UUID | None
    name: str


@dataclass
class WorkflowPage:
    """Everything the page shows, read once per request."""

    row: Workflow
    steps: list[Step]  # the first STEP_ROWS, with their deps' names
    step_count: int
    counts: dict[str, int]
    subs: list[Workflow]
    graph: Layout
    svg: SafeString = field(default_factory=lambda: SafeString(""))


def load(row: Workflow) -> WorkflowPage:
    """Steps, edges and the graph of ``row`` in at most six queries whatever its size,
    reading the columns the page shows rather than whole rows (args, results, errors)."""
    steps = _steps(row.id)
    edges = _edges(row.id)
    subs = list(shown_workflows().filter(parent_workflow_id=row.id)
                .order_by("inserted_at", "id")[:SUB_LIMIT])
    nodes, pairs = _graph(row, steps, edges, subs)
    graph = layout(nodes, pairs, more_href=steps_url(row.id))
    names: dict[uuid.UUID, list[str]] = {}
    for edge in edges:
        names.setdefault(edge.job_id, []).append(edge.name)
    shown = [replace(step, deps=tuple(names.get(step.id, [])[:DEP_NAMES]),
                     more_deps=max(0, len(names.get(step.id, [])) - DEP_NAMES))
             for step in steps[:STEP_ROWS]]
    counts = dict(Counter(step.state for step in steps).most_common())
    return WorkflowPage(row=row, steps=shown, step_count=len(steps), counts=counts, subs=subs,
                        graph=graph, svg=render(graph, STATUS_COLOURS))


def steps_url(workflow_id: uuid.UUID, state: str | None = None) -> str:
    """The job list filtered to this workflow's steps (and one state)."""
    query = f"?workflow={workflow_id.hex}" + (f"&state={state}" if state else "")
    return reverse("admin:kathikon_job_changelist") + query


def job_url(pk: uuid.UUID) -> str:
    return reverse("admin:kathikon_job_change", args=[pk])


def workflow_url(pk: uuid.UUID) -> str:
    return reverse("admin:kathikon_workflow_change", args=[pk])


# -- internals ------------------------------------------------------------------------------

def _steps(workflow_id: uuid.UUID) -> list[Step]:
    return [Step(*values) for values in store.steps_of(workflow_id, using=vendor.read_alias())
            .order_by("id").values_list(*STEP_COLUMNS)]


def _edges(workflow_id: uuid.UUID) -> list[Edge]:
    steps = store.step_ids(workflow_id, using=vendor.read_alias())
    return [Edge(*values) for values in WorkflowDep.objects.using(vendor.read_alias())
            .filter(job_id__in=Subquery(steps)).order_by("id")
            .values_list("job_id", "dep_job_id", "dep_workflow_id", "name")]


def _url_maker(name: str) -> Callable[[uuid.UUID], str]:
    """``reverse(name, args=[pk])`` for many ids: reversed once, the id put in."""
    blank = uuid.UUID(int=0)
    template = reverse(name, args=[blank])
    head, _, tail = template.partition(str(blank))
    return lambda pk: f"{head}{pk}{tail}"


def _graph(row: Workflow, steps: list[Step], edges: list[Edge],
           subs: list[Workflow]) -> tuple[list[Node], list[tuple[str, str]]]:
    """Nodes and ``(dependency, dependent)`` pairs: this workflow's steps, its sub-workflows
    (each waiting on the steps its first steps wait on), and what it waits on elsewhere."""
    ours = {step.id for step in steps}
    url = _url_maker("admin:kathikon_job_change")  # reverse() 10,000 times costs 0.2 s
    nodes = [Node(step.id.hex, step.name or step.id.hex, step.state, "step", url(step.id),
                  f"{step.name}: {step.state} · {step.worker_name} · "
                  f"attempt {step.attempts}/{step.max_attempts}") for step in steps]
    sub_ids = {sub.id for sub in subs}
    nodes += [Node(_wf_key(sub.id), sub.name, sub.status, "sub", workflow_url(sub.id),
                   f"sub-workflow {sub.name}: {sub.status}, {sub.steps_total} steps")
              for sub in subs]
    pairs: list[tuple[str, str]] = []
    outside_jobs: dict[uuid.UUID, str] = {}
    outside_workflows: set[uuid.UUID] = set()
    for edge in edges:
        if edge.dep_job_id is not None:
            pairs.append((edge.dep_job_id.hex, edge.job_id.hex))
            if edge.dep_job_id not in ours:
                outside_jobs[edge.dep_job_id] = edge.name
        elif edge.dep_workflow_id is not None:
            pairs.append((_wf_key(edge.dep_workflow_id), edge.job_id.hex))
            if edge.dep_workflow_id not in sub_ids:
                outside_workflows.add(edge.dep_workflow_id)
    nodes += _outside_steps(outside_jobs)
    for other in shown_workflows().filter(pk__in=sorted(outside_workflows)):
        nodes.append(Node(_wf_key(other.id), other.name, other.status, "workflow",
                          workflow_url(other.id), f"workflow {other.name}: {other.status}"))
    pairs += [(dep.hex, _wf_key(sub)) for sub, dep in _sub_deps(row.id, sub_ids)]
    return nodes, pairs


def _outside_steps(wanted: dict[uuid.UUID, str]) -> list[Node]:
    """Steps of other workflows this one waits for, named as this workflow calls them."""
    if not wanted:
        return []
    found = (Job.objects.using(vendor.read_alias()).filter(id__in=list(wanted))
             .values_list("id", "state", "workflow_id"))
    return [Node(pk.hex, wanted[pk], state, "external", job_url(pk),
                 f"{wanted[pk]} (a step of workflow {workflow_id.hex if workflow_id else '?'})"
                 f": {state}") for pk, state, workflow_id in found]


def _sub_deps(workflow_id: uuid.UUID,
              sub_ids: set[uuid.UUID]) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """``(sub-workflow id, step id)``: the steps of this workflow that a sub-workflow's
    steps wait for (the deps it was added with, given to its first steps)."""
    if not sub_ids:
        return []
    jobs = Job.objects.using(vendor.read_alias())
    sub_steps = store.step_ids(sorted(sub_ids), using=vendor.read_alias())
    our_steps = store.step_ids(workflow_id, using=vendor.read_alias())
    found = (WorkflowDep.objects.using(vendor.read_alias())
             .filter(job_id__in=Subquery(sub_steps), dep_job_id__in=Subquery(our_steps))
             .annotate(sub=Subquery(jobs.filter(id=OuterRef("job_id"))
                                    .values("workflow_id")[:1]))
             .values_list("sub", "dep_job_id").distinct())
    # The annotation comes back as text on SQLite and MariaDB: read it as an id again.
    pairs = [(parse_id(sub), parse_id(dep)) for sub, dep in found]
    return [(sub, dep) for sub, dep in pairs if sub is not None and dep is not None]


def _wf_key(pk: uuid.UUID) -> str:
    return f"wf:{pk.hex}"


def shown_workflows() -> QuerySet[Workflow]:
    """Workflow rows for a page: ``READ_DATABASE`` when set (storage.vendor.read_alias)."""
    return store.workflows().using(vendor.read_alias())
