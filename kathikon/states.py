"""The job state machine: states and the transitions allowed between them."""

from __future__ import annotations

from django.db import models


class JobState(models.TextChoices):
    """Where a job is in its life.

    ``scheduled → available → claimed → running → completed | retryable | dead |
    cancelled``; ``retryable`` jobs become claimable again at ``available_at``.
    A workflow step starts ``waiting`` until its dependencies have settled, then is
    released (``available``), cancelled or ``held`` for a person (kathikon.workflows).
    New states go last: ``unique_states`` stores one bit per state in this order.
    """

    SCHEDULED = "scheduled", "Scheduled"
    AVAILABLE = "available", "Available"
    CLAIMED = "claimed", "Claimed"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    RETRYABLE = "retryable", "Retryable"
    DEAD = "dead", "Dead"
    CANCELLED = "cancelled", "Cancelled"
    WAITING = "waiting", "Waiting"  # a workflow step whose dependencies have not settled
    HELD = "held", "Held"  # a workflow step held for a person after a dependency failed


CLAIMABLE_STATES = (JobState.AVAILABLE, JobState.RETRYABLE)
EXECUTING_STATES = (JobState.CLAIMED, JobState.RUNNING)
TERMINAL_STATES = (JobState.COMPLETED, JobState.DEAD, JobState.CANCELLED)
#: Not started and not finished: the states a job can be cancelled in.
PENDING_STATES = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.RETRYABLE, JobState.WAITING,
                  JobState.HELD)
#: A workflow step waiting for its dependencies, or held for a person.
BLOCKED_STATES = (JobState.WAITING, JobState.HELD)
#: Every state but the executing ones and ``completed``: the states a job rests in rather
#: than passes through on every run. On PostgreSQL the admin's general indexes hold only
#: these, so a claim (into running) and an ack (into completed) add no entry to them.
RESTING_STATES = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.RETRYABLE, JobState.DEAD,
                  JobState.CANCELLED, JobState.WAITING, JobState.HELD)
#: The resting states but ``available``: what the admin's ``(state, id)`` and ``(queue,
#: state, id)`` indexes hold on PostgreSQL. Available jobs are found by queue through the
#: claim index, which holds them anyway; two entries fewer for every insert and for every
#: workflow step a finished dependency releases.
LISTED_STATES = tuple(state for state in RESTING_STATES if state != JobState.AVAILABLE)

#: Every transition the storage layer may perform, as (from, to).
TRANSITIONS: frozenset[tuple[str, str]] = frozenset(
    {
        (JobState.SCHEDULED, JobState.AVAILABLE),  # promoter
        (JobState.SCHEDULED, JobState.CANCELLED),
        (JobState.AVAILABLE, JobState.CLAIMED),  # claim() for external runners
        (JobState.AVAILABLE, JobState.RUNNING),  # the runtime claims straight into running
        (JobState.AVAILABLE, JobState.CANCELLED),
        (JobState.RETRYABLE, JobState.CLAIMED),
        (JobState.RETRYABLE, JobState.RUNNING),
        (JobState.RETRYABLE, JobState.AVAILABLE),  # retry now
        (JobState.RETRYABLE, JobState.CANCELLED),
        (JobState.CLAIMED, JobState.RUNNING),
        (JobState.CLAIMED, JobState.AVAILABLE),  # released at shutdown
        (JobState.CLAIMED, JobState.RETRYABLE),  # rescued
        (JobState.CLAIMED, JobState.DEAD),  # rescued, out of attempts
        (JobState.RUNNING, JobState.COMPLETED),
        (JobState.RUNNING, JobState.RETRYABLE),
        (JobState.RUNNING, JobState.DEAD),
        (JobState.RUNNING, JobState.SCHEDULED),  # snoozed
        (JobState.RUNNING, JobState.AVAILABLE),  # released at shutdown
        (JobState.DEAD, JobState.AVAILABLE),  # retry
        (JobState.CANCELLED, JobState.AVAILABLE),  # retry
        (JobState.COMPLETED, JobState.AVAILABLE),  # retry
        # workflow steps (kathikon.workflows)
        (JobState.WAITING, JobState.AVAILABLE),  # released: its dependencies settled
        (JobState.WAITING, JobState.SCHEDULED),  # released, due later
        (JobState.WAITING, JobState.HELD),  # a dependency failed; held for a person
        (JobState.WAITING, JobState.CANCELLED),  # a dependency failed, or cancelled by a person
        (JobState.HELD, JobState.AVAILABLE),  # released by a person
        (JobState.HELD, JobState.WAITING),  # the failed dependency was retried
        (JobState.HELD, JobState.CANCELLED),
        (JobState.CANCELLED, JobState.WAITING),  # the dependency that cancelled it was retried
    }
)


def can_transition(source: str, target: str) -> bool:
    """Whether the state machine allows ``source → target``."""
    return (source, target) in TRANSITIONS
