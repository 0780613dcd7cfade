"""Internal: the ``Workflow`` builder — steps, their dependencies, one insert.

See kathikon.workflows for the public description.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kathikon import signals
from kathikon.exceptions import InvalidJob, InvalidWorkflow
from kathikon.ids import new_id
from kathikon.jobspec import JobRow, build_row, dump_args, worker_class
from kathikon.models import Job
from kathikon.models import Workflow as WorkflowRow
from kathikon.routing import require_home
from kathikon.storage import fetch_job
from kathikon.storage import workflows as store
from kathikon.storage.settle import CANCEL, POLICIES
from kathikon.workflows.announce import announce, announce_started
from kathikon.workflows.graph import MAX_STEPS, check_name, check_workflow_name, order
from kathikon.workflows.tasks import as_step_spec

#: Options a step takes besides those of ``kathikon.insert``.
_REFUSED = frozenset({"batch_id", "parent_job_id", "cron_id", "scheduled_at"})


@dataclass(frozen=True, slots=True)
class StepRef:
    """A step of another (inserted) workflow, as a dependency: ``other.step("encode")``.

    ``alias``: the name ``dep_result`` knows it by (default ``"<workflow name>.<step>"``).
    """

    workflow_id: uuid.UUID
    step: str
    alias: str


@dataclass(slots=True)
class _Step:
    name: str
    row: JobRow
    deps: list[Any]


@dataclass(slots=True)
class _Sub:
    name: str
    workflow: Workflow
    deps: list[Any]


@dataclass(slots=True)
class _Flat:
    """The builder's staged nodes flattened for storage."""

    workflows: list[WorkflowRow] = field(default_factory=list)
    rows: list[JobRow] = field(default_factory=list)
    deps: dict[uuid.UUID, list[store.DepRef]] = field(default_factory=dict)


class Workflow:
    """Jobs that depend on jobs: build the graph with ``add``, write it with ``insert``."""

    def __init__(self, name: str = "workflow", *, meta: dict[str, Any] | None = None) -> None:
        self.name = check_workflow_name(name)
        if meta is not None and not isinstance(meta, dict):
            raise InvalidWorkflow("a workflow's meta must be a dict")
        if meta:
            dump_args(meta, "meta")
        self.meta = dict(meta or {})
        self.id: uuid.UUID = new_id()
        self.inserted = False
        self._nodes: dict[str, _Step | _Sub] = {}
        self._sub_of: Workflow | None = None

    def __repr__(self) -> str:
        state = "inserted" if self.inserted else f"{len(self._nodes)} staged"
        return f"<Workflow {self.name!r} {self.id.hex} ({state})>"

    @property
    def hex_id(self) -> str:
        return self.id.hex

    @classmethod
    def load(cls, workflow_id: object) -> Workflow:
        """The builder of an inserted workflow, to ``append`` steps to it while it runs."""
        row = store.fetch_workflow(workflow_id)
        loaded = cls(row.name, meta=row.meta)
        loaded.id, loaded.inserted = row.id, True
        return loaded

    # -- building ----------------------------------------------------------------------------

    def add(self, name: str, worker: Any, args: dict[str, Any] | None = None, *,
            deps: Iterable[Any] = (), on_dep_failure: str = CANCEL, **options: Any) -> str:
        """Stage a step; returns its name. Checked now: a bad step raises before any write.

        ``worker``: a Worker class or dotted path, or a Django ``@task`` (``args`` are then
        its keyword arguments). ``deps``: names of this workflow's steps or sub-workflows,
        ``other.step("name")``, an inserted ``Workflow``, or a step's ``Job``.
        ``on_dep_failure``: ``"cancel"`` (default), ``"run"`` or ``"hold"``.
        ``options``: as for ``kathikon.insert`` (queue, priority, max_attempts,
        schedule_in, schedule_at, meta, unique).
        """
        check_name(name)
        self._check_new(name)
        if on_dep_failure not in POLICIES:
            raise InvalidWorkflow(f"step {name!r}: on_dep_failure must be one of "
                                  f"{', '.join(POLICIES)}, not {on_dep_failure!r:.40}", step=name)
        refused = sorted(set(options) & _REFUSED)
        if refused:
            raise InvalidJob(f"step {name!r}: option {refused[0]!r} is not for workflow steps",
                             key=refused[0])
        try:
            worker, args, options = as_step_spec(worker, args, options)
            row = build_row(worker, args, options)
            require_home([row.queue], "a workflow")
        except InvalidJob as exc:
            raise InvalidJob(f"step {name!r}: {exc}", key=exc.key) from None
        row.step, row.on_dep_failure = name, on_dep_failure
        self._nodes[name] = _Step(name, row, _dep_list(name, deps))
        return name

    def add_workflow(self, name: str, workflow: Workflow, *, deps: Iterable[Any] = ()) -> str:
        """Stage ``workflow`` as a sub-workflow: its first steps wait for ``deps``, and a
        step of this workflow that names it in its ``deps`` waits for all of it."""
        check_name(name, "sub-workflow")
        self._check_new(name)
        if not isinstance(workflow, Workflow) or workflow is self:
            raise InvalidWorkflow(f"sub-workflow {name!r} must be another Workflow", step=name)
        if workflow.inserted or workflow._sub_of is not None:
            raise InvalidWorkflow(f"sub-workflow {name!r} is inserted already or part of "
                                  "another workflow; depend on it instead", step=name)
        workflow._sub_of = self
        self._nodes[name] = _Sub(name, workflow, _dep_list(name, deps))
        return name

    def step(self, name: str, *, alias: str | None = None) -> StepRef:
        """This workflow's step ``name``, for another workflow's ``deps``; ``dep_result``
        knows it as ``alias`` (default ``"<this workflow's name>.<name>"``)."""
        check_name(name)
        return StepRef(self.id, name, (alias or f"{self.name}.{name}")[:200])

    # -- writing -----------------------------------------------------------------------------

    def insert(self) -> Workflow:
        """Insert every staged step in one transaction (inside yours when there is one).

        On a workflow already inserted (or ``load``-ed), the staged steps are appended
        to it; ``WorkflowFinished`` if it has finished or was cancelled.
        """
        if self._sub_of is not None:
            raise InvalidWorkflow(f"workflow {self.name!r} is a sub-workflow; insert its parent")
        if not self._nodes:
            raise InvalidWorkflow(f"workflow {self.name!r} has no steps to insert")
        flat = _Flat()
        self._flatten(flat, parent=None)
        if len(flat.rows) > MAX_STEPS:
            raise InvalidWorkflow(f"{len(flat.rows)} steps in one insert; at most {MAX_STEPS} "
                                  "(insert the rest with later appends)")
        plan = store.Plan(workflows=flat.workflows, rows=flat.rows, deps=flat.deps,
                          append_to=self.id if self.inserted else None)
        inserted = store.insert_workflow(plan)
        self._mark_inserted()
        _announce_insert(inserted)
        return self

    def append(self, name: str, worker: Any, args: dict[str, Any] | None = None,
               **options: Any) -> Job:
        """``add`` one step and ``insert`` it now; returns its job."""
        self.add(name, worker, args, **options)
        step = self._nodes[name]
        self.insert()
        assert isinstance(step, _Step)
        return fetch_job(step.row.id)

    # -- internals ---------------------------------------------------------------------------

    def _check_new(self, name: str) -> None:
        if name in self._nodes:
            raise InvalidWorkflow(f"step name {name!r} is used twice in workflow "
                                  f"{self.name!r}", step=name)
        if len(self._nodes) >= MAX_STEPS:  # steps and sub-workflows alike: a cheap bound
            raise InvalidWorkflow(f"workflow {self.name!r}: at most {MAX_STEPS} steps per insert")

    def _mark_inserted(self) -> None:
        self.inserted = True
        for node in self._nodes.values():
            if isinstance(node, _Sub):
                node.workflow._mark_inserted()
        self._nodes = {}

    def _flatten(self, flat: _Flat, parent: uuid.UUID | None,
                 inherited: list[store.DepRef] | None = None,
                 node_name: str | None = None) -> None:
        """This builder's rows and edges into ``flat``; ``inherited``: the deps of the
        sub-workflow node ``node_name``, given to its first steps."""
        if not self.inserted:
            flat.workflows.append(WorkflowRow(id=self.id, name=self.name, meta=self.meta,
                                              parent_workflow_id=parent, step=node_name))
        names = {name: [dep for dep in node.deps if isinstance(dep, str)]
                 for name, node in self._nodes.items()}
        order(names)  # cycles and self-dependencies, before anything is looked up
        if self.inserted:
            taken = sorted({*store.find_steps(self.id, list(self._nodes)),
                            *store.find_sub_workflows(self.id, list(self._nodes))})
            if taken:
                raise InvalidWorkflow(f"step name {taken[0]!r} is used twice in workflow "
                                      f"{self.name!r} (it has that step already)", step=taken[0])
        existing = self._existing(names)
        for name, node in self._nodes.items():
            refs = self._resolve(name, node.deps, existing)
            if isinstance(node, _Sub):
                node.workflow._flatten(flat, self.id, refs, name)
                continue
            inside = [dep for dep in node.deps if isinstance(dep, str) and dep in self._nodes]
            if inherited and not inside:
                refs = _unique_names(name, [*inherited, *refs])
            node.row.workflow_id = self.id
            flat.rows.append(node.row)
            if refs:
                flat.deps[node.row.id] = refs

    def _existing(self, names: dict[str, list[str]]) -> dict[str, store.DepRef]:
        """Deps named by string that are not staged: steps or sub-workflows already inserted."""
        wanted = sorted({dep for deps in names.values() for dep in deps if dep not in self._nodes})
        if not wanted:
            return {}
        found: dict[str, store.DepRef] = {}
        if self.inserted:
            for dep, pk in store.find_steps(self.id, wanted).items():
                found[dep] = store.DepRef(dep, job_id=pk)
            for dep, pk in store.find_sub_workflows(self.id, wanted).items():
                found.setdefault(dep, store.DepRef(dep, workflow_id=pk))
        for name, deps in names.items():
            for dep in deps:
                if dep not in self._nodes and dep not in found:
                    raise InvalidWorkflow(f"step {name!r} depends on {dep!r}, which is no step "
                                          f"of workflow {self.name!r}", step=name)
        return found

    def _resolve(self, name: str, deps: list[Any],
                 existing: dict[str, store.DepRef]) -> list[store.DepRef]:
        refs: list[store.DepRef] = []
        for dep in deps:
            if isinstance(dep, str):
                node = self._nodes.get(dep)
                if isinstance(node, _Step):
                    refs.append(store.DepRef(dep, job_id=node.row.id))
                elif isinstance(node, _Sub):
                    refs.append(store.DepRef(dep, workflow_id=node.workflow.id))
                else:
                    refs.append(existing[dep])
            elif isinstance(dep, StepRef):
                found = store.find_steps(dep.workflow_id, [dep.step])
                if dep.step not in found:
                    raise InvalidWorkflow(f"step {name!r} depends on step {dep.step!r} of "
                                          f"workflow {dep.workflow_id.hex}, which has no such "
                                          "step (insert that workflow first)", step=name)
                refs.append(store.DepRef(dep.alias, job_id=found[dep.step]))
            elif isinstance(dep, Workflow):
                if not dep.inserted:
                    raise InvalidWorkflow(f"step {name!r} depends on workflow {dep.name!r}, "
                                          "which is not inserted (insert it first, or stage "
                                          "it with add_workflow)", step=name)
                refs.append(store.DepRef(dep.name[:200], workflow_id=dep.id))
            else:  # a step's Job
                if dep.workflow_id is None:
                    raise InvalidWorkflow(f"step {name!r} depends on job {dep.id.hex}, which "
                                          "is no workflow step", step=name)
                refs.append(store.DepRef(dep.step or dep.id.hex, job_id=dep.id))
        return _unique_names(name, refs)


def _dep_list(name: str, deps: Iterable[Any]) -> list[Any]:
    if isinstance(deps, (str, bytes)):
        deps = [deps]
    found = list(deps)
    for dep in found:
        if isinstance(dep, str):
            if dep == name:
                raise InvalidWorkflow(f"step {name!r} depends on itself", step=name)
        elif not isinstance(dep, (StepRef, Workflow, Job)):
            raise InvalidWorkflow(f"step {name!r}: a dependency is a step name, "
                                  "workflow.step(name), a Workflow or a step's Job, not "
                                  f"{type(dep).__name__}", step=name)
    return found


def _unique_names(name: str, refs: Sequence[store.DepRef]) -> list[store.DepRef]:
    seen: dict[str, store.DepRef] = {}
    for ref in refs:
        if ref.name in seen:
            if seen[ref.name] == ref:
                continue  # the same dependency named twice
            raise InvalidWorkflow(f"step {name!r} has two dependencies named {ref.name!r}; "
                                  "dep_result() could not tell them apart", step=name)
        seen[ref.name] = ref
    return list(seen.values())


def _announce_insert(inserted: store.Inserted) -> None:
    """Sent once written: inside your ``atomic()`` that is before your commit, as for
    ``job_inserted`` of any insert."""
    announce_started(inserted.workflows)
    for row in inserted.rows:
        _, cls = worker_class(row.worker)
        if signals.job_inserted.has_listeners(cls):
            signals.send(signals.job_inserted, cls, job=row.to_job())
    announce(inserted.settled)
