"""The job state machine: states and the transitions allowed between them."""

from __future__ import annotations

from django.db import models


class JobState(models.TextChoices):
    """Where a job is in its life.

    ``scheduled → available → claimed → running → completed | retryable | dead |
    cancelled``; ``retryable`` jobs become claimable again at ``available_at``.
    """

    SCHEDULED = "scheduled", "Scheduled"
    AVAILABLE = "available", "Available"
    CLAIMED = "claimed", "Claimed"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    RETRYABLE = "retryable", "Retryable"
    DEAD = "dead", "Dead"
    CANCELLED = "cancelled", "Cancelled"


CLAIMABLE_STATES = (JobState.AVAILABLE, JobState.RETRYABLE)
EXECUTING_STATES = (JobState.CLAIMED, JobState.RUNNING)
TERMINAL_STATES = (JobState.COMPLETED, JobState.DEAD, JobState.CANCELLED)
PENDING_STATES = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.RETRYABLE)
#: Every state but the executing ones and ``completed``: the states a job rests in rather
#: than passes through on every run. On PostgreSQL the admin's general indexes hold only
#: these, so a claim (into running) and an ack (into completed) add no entry to them.
RESTING_STATES = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.RETRYABLE, JobState.DEAD,
                  JobState.CANCELLED)

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
    }
)


def can_transition(source: str, target: str) -> bool:
    """Whether the state machine allows ``source → target``."""
    return (source, target) in TRANSITIONS
