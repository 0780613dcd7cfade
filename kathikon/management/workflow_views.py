"""Internal: workflows as ``kathikon_ops`` shows them — table rows for people, dicts for
``--json`` — made from kathikon.workflows' snapshots, without queries of their own."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from kathikon.management.cells import clip, when
from kathikon.states import TERMINAL_STATES
from kathikon.workflows import StepInfo, WorkflowInfo

#: How step states are listed: finished, then executing, then not started, then failed.
STATE_ORDER = ("completed", "running", "claimed", "available", "scheduled", "retryable",
               "waiting", "held", "dead", "cancelled")
LIST_HEADERS = ("ID", "NAME", "STATUS", "DONE", "FAILED", "INSERTED", "FINISHED", "STEPS")
STEP_HEADERS = ("ID", "STEP", "STATE", "WORKER", "QUEUE", "DEPS", "ATTEMPTS", "STARTED",
                "FINISHED")


def steps_done(info: WorkflowInfo) -> int:
    """Steps that finished (completed, dead or cancelled).

    The stored total minus the steps in any other state, so that finished steps
    the pruner has deleted still count as done.
    """
    pending = sum(n for state, n in info.counts.items() if state not in TERMINAL_STATES)
    return max(0, info.steps_total - pending)


def status_text(info: WorkflowInfo) -> str:
    """The status; ``cancelling`` while a cancelled workflow waits for its running steps."""
    if info.status == "running" and info.cancelled_at is not None:
        return "cancelling"
    return info.status


def counts_text(counts: dict[str, int]) -> str:
    """``2 completed, 1 running, 3 waiting``: the states its steps are in, zeros left out."""
    order = {state: index for index, state in enumerate(STATE_ORDER)}
    shown = sorted((state for state, n in counts.items() if n),
                   key=lambda state: (order.get(state, len(order)), state))
    return ", ".join(f"{counts[state]} {state}" for state in shown)


def list_row(info: WorkflowInfo) -> list[Any]:
    return [info.id, clip(info.name, 40), status_text(info),
            f"{steps_done(info)}/{info.steps_total}", info.steps_failed, when(info.inserted_at),
            when(info.finished_at), counts_text(info.counts) or None]


def step_row(step: StepInfo) -> list[Any]:
    return [step.id, clip(step.name, 40), step.state, step.worker, step.queue,
            clip(", ".join(step.deps), 50) or None, step.attempts, when(step.started_at),
            when(step.completed_at)]


def fields(info: WorkflowInfo) -> list[tuple[str, Any]]:
    """``(label, value)`` of the workflow for ``kathikon_ops workflow ID``."""
    return [("id", info.id), ("name", info.name), ("status", status_text(info)),
            ("parent_workflow", info.parent_workflow_id),
            ("steps", f"{steps_done(info)}/{info.steps_total} done, "
                      f"{info.steps_failed} failed"),
            ("step_states", counts_text(info.counts)),
            ("sub_workflows", ", ".join(info.sub_workflows)),
            ("inserted_at", when(info.inserted_at)), ("finished_at", when(info.finished_at)),
            ("cancelled_at", when(info.cancelled_at))]


def workflow_dict(info: WorkflowInfo, *, listed: bool = False) -> dict[str, Any]:
    """The workflow without its steps, with ``steps_done``; times stay datetimes.

    ``listed``: a row of ``list_workflows``, which reads no sub-workflows either.
    """
    left_out = ("steps", "sub_workflows") if listed else ("steps",)
    data = {name: value for name, value in asdict(info).items() if name not in left_out}
    data["steps_done"] = steps_done(info)
    return data


def hints(info: WorkflowInfo) -> list[str]:
    """What a person can do about the steps that stopped the workflow."""
    found = []
    held = [step.id for step in info.steps if step.state == "held"]
    if held:
        found.append(f"{len(held)} step(s) held after a dependency failed: run one anyway with "
                     f"`manage.py kathikon_ops release {held[0]}`, or cancel it with "
                     f"`manage.py kathikon_ops cancel {held[0]}`")
    dead = [step.id for step in info.steps if step.state == "dead"]
    if dead:
        found.append(f"{len(dead)} step(s) dead: `manage.py kathikon_ops retry {dead[0]}` runs "
                     "one again, and the steps its failure cancelled wait for it again")
    return found
