"""Internal: what settling workflow steps deals in — the members that settle, what it changed.

Shared by kathikon.storage.settle (the portable path) and settle_postgres (its
single-statement path), and read by the callers that send the signals.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kathikon.models import Workflow
from kathikon.states import JobState

CANCEL, RUN, HOLD = "cancel", "run", "hold"
POLICIES = (CANCEL, RUN, HOLD)
FAILED_STATES = (JobState.DEAD, JobState.CANCELLED)
#: The states of the steps whose counters a settle changes.
TOUCHED_STATES = (JobState.WAITING, JobState.HELD, JobState.CANCELLED)
#: The error a step cancelled by its policy carries: a retry of the failed dependency
#: restores exactly these steps (a person's cancel writes no error).
DEP_FAILED = "kathikon.DependencyFailed"


class Member(NamedTuple):
    """A step or a workflow that settled (``undo``: was settled and is not any more).

    ``failed``: it ended (or had ended, for ``undo``) dead, cancelled or failed.
    ``parent``: the workflow it counts in. A named tuple, not a frozen dataclass: an ack
    batch makes one per step, and a frozen dataclass takes 1.1 µs to build, this 0.3.
    :func:`step_members` builds them from positional tuples: keep the fields' order.
    """

    id: uuid.UUID
    parent: uuid.UUID | None
    failed: bool
    is_workflow: bool = False
    undo: bool = False


@dataclass(slots=True)
class Settled:
    """What one settle changed, for the signals sent after the commit."""

    released: dict[uuid.UUID, list[tuple[str, str]]] = field(
        default_factory=lambda: defaultdict(list))  # workflow → [(job id hex, step)]
    held: list[uuid.UUID] = field(default_factory=list)
    cancelled: list[uuid.UUID] = field(default_factory=list)
    finished: list[Workflow] = field(default_factory=list)
    queues: set[str] = field(default_factory=set)  # of the steps released into available

    def __bool__(self) -> bool:
        return bool(self.released or self.held or self.cancelled or self.finished)

    def merge(self, other: Settled) -> Settled:
        for workflow_id, steps in other.released.items():
            self.released[workflow_id].extend(steps)
        self.held += other.held
        self.cancelled += other.cancelled
        self.finished += other.finished
        self.queues |= other.queues
        return self


def step_members(jobs: Iterable[tuple[uuid.UUID, uuid.UUID | None, str]]) -> list[Member]:
    """Members for ``(job id, workflow id, final state)`` of steps that just settled.

    Built with ``tuple.__new__``, as ``Member._make`` does: an ack batch makes one per
    step, and the named tuple's own ``__new__`` is a Python function (it takes twice as
    long).
    """
    new, failed = tuple.__new__, FAILED_STATES
    return [new(Member, (pk, workflow_id, state in failed, False, False))
            for pk, workflow_id, state in jobs if workflow_id is not None]


def workflow_counts(frontier: list[Member]) -> dict[uuid.UUID, list[int]]:
    """What the frontier changes on its workflows: ``{id: [unfinished, failed]}`` to add.

    Grouped by the ids' integers: each step of an ack batch carries its own UUID object
    for its workflow, and hashing and comparing UUIDs runs Python code (3x slower).
    """
    by_int: dict[int, list[Any]] = {}
    for member in frontier:
        parent = member.parent
        if parent is None:
            continue
        sign = -1 if member.undo else 1
        change = by_int.get(parent.int)
        if change is None:
            change = by_int[parent.int] = [parent, 0, 0]
        change[1] -= sign
        change[2] += sign * member.failed
    return {parent: [unfinished, failed] for parent, unfinished, failed in by_int.values()}
