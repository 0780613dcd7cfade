"""The state machine: the transitions storage performs are exactly the allowed ones."""

from __future__ import annotations

import itertools

import pytest

import kathikon
from kathikon import storage
from kathikon.executor import execute_job
from kathikon.models import Job
from kathikon.states import TERMINAL_STATES, TRANSITIONS, JobState, can_transition
from tests import workers

pytestmark = pytest.mark.django_db


def test_terminal_states_only_leave_through_retry():
    """A retry (available), or for a workflow step cancelled by a failed dependency, that
    dependency's retry (waiting again)."""
    for terminal in TERMINAL_STATES:
        allowed = {"available", "waiting"} if terminal == "cancelled" else {"available"}
        assert {target for source, target in TRANSITIONS if source == terminal} == allowed


def test_no_transition_skips_claiming():
    for source in ("scheduled", "available", "retryable"):
        assert not can_transition(source, JobState.COMPLETED)
        assert not can_transition(source, JobState.DEAD)


def observed(job_id) -> str:
    return Job.objects.get(id=job_id).state


def test_operations_refuse_illegal_transitions_and_change_nothing():
    """Every operation from every state either follows TRANSITIONS or raises."""
    operations = {
        "cancel": lambda job: kathikon.cancel(job.id),
        "retry": lambda job: kathikon.retry(job.id),
        "claim": lambda job: kathikon.claim(job.id),
    }
    targets = {"cancel": "cancelled", "retry": "available", "claim": "claimed"}
    for state, (name, operation) in itertools.product(JobState.values, operations.items()):
        job = kathikon.insert(workers.Succeed, {})
        Job.objects.filter(id=job.id).update(state=state)
        try:
            operation(job)
        except kathikon.KathikonError:
            assert observed(job.id) == state, f"{name} from {state} changed the job"
        else:
            assert can_transition(state, targets[name]), f"{name} from {state} was allowed"
            assert observed(job.id) == targets[name]


def test_acks_only_apply_to_executing_jobs():
    job = kathikon.insert(workers.Succeed, {})
    (claimed,) = storage.claim_jobs("default", 1, "n")
    for state in set(JobState.values) - {"claimed", "running"}:
        Job.objects.filter(id=job.id).update(state=state)
        assert not execute_job(claimed).written
        assert observed(job.id) == state
