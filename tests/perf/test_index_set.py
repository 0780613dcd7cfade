"""On PostgreSQL a claim and an ack add an entry to as few indexes as the admin allows.

Every claim (into running) and ack (into completed) changes ``state``, which partial
indexes name, so the update is never HOT and each index whose condition holds for the
new row takes an entry. The general admin indexes hold resting jobs only (migration 0013);
this pins which indexes a running and a completed job are in.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone

from kathikon.states import JobState
from tests import workers
from tests.ops.conftest import make_job

CLAIMED_INTO = {"kathikon_job_pkey", "kathikon_job_inserted", "kathikon_job_executing"}
ACKED_INTO = {"kathikon_job_pkey", "kathikon_job_inserted", "kathikon_job_completed",
              "kathikon_job_done"}


def indexes_holding(job_id: object) -> set[str]:
    """The indexes of kathikon_job whose condition (if any) holds for the row ``job_id``.

    On a partitioned table (docs/partitioning.md) the indexes are the live partition's,
    under the same names; every day partition has copies of them."""
    with connection.cursor() as cursor:
        cursor.execute("""
            SELECT c.relname, pg_get_expr(i.indpred, i.indrelid)
            FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
            WHERE i.indrelid = coalesce(to_regclass('kathikon_job_live'),
                                        'kathikon_job'::regclass)""")
        held = set()
        for name, condition in cursor.fetchall():
            cursor.execute(f"SELECT {condition or 'true'} FROM kathikon_job WHERE id = %s",
                           [job_id])
            if cursor.fetchone()[0]:
                held.add(name)
    return held


@pytest.mark.django_db
def test_a_claim_and_an_ack_touch_only_their_own_indexes(vendor):
    if vendor != "postgresql":
        pytest.skip("the general indexes are partial on PostgreSQL only")
    running = make_job(state=JobState.RUNNING, attempts=1)
    completed = make_job(state=JobState.COMPLETED, attempts=1)
    dead = make_job(state=JobState.DEAD, attempts=1)
    assert indexes_holding(running.id) == CLAIMED_INTO
    assert indexes_holding(completed.id) == ACKED_INTO
    # A failure is rare and stays in the admin's (state, id), (queue, …) and (worker, …).
    assert {"kathikon_job_state", "kathikon_job_queue_state",
            "kathikon_job_worker_state"} <= indexes_holding(dead.id)


@pytest.mark.django_db
def test_an_available_job_is_in_the_claim_index_not_the_state_ones(vendor):
    """The claim index holds available jobs by queue; (state, id) and (queue, state, id)
    leave them out (an insert and a step's release write two entries fewer), the worker's
    index keeps them (nothing else finds a worker's available jobs)."""
    if vendor != "postgresql":
        pytest.skip("the general indexes are partial on PostgreSQL only")
    available = make_job(state=JobState.AVAILABLE)
    assert indexes_holding(available.id) == {
        "kathikon_job_pkey", "kathikon_job_inserted", "kathikon_job_claim",
        "kathikon_job_worker_state"}


@pytest.mark.django_db
def test_a_workflow_step_touches_no_more_indexes_than_a_plain_job(vendor):
    """No index on the job table names a step's workflow (its name lives in
    kathikon_workflowstep): a release, claim and ack of a step write what a plain job's do."""
    if vendor != "postgresql":
        pytest.skip("the general indexes are partial on PostgreSQL only")
    import kathikon
    from kathikon.models import Job

    wf = kathikon.Workflow("indexes")
    wf.add("a", workers.Succeed)
    wf.insert()
    step = Job.objects.get(workflow_id=wf.id, step="a")
    available = make_job(state=JobState.AVAILABLE)
    assert indexes_holding(step.id) == indexes_holding(available.id)
    for state, expected in ((JobState.RUNNING, CLAIMED_INTO), (JobState.COMPLETED, ACKED_INTO)):
        completed_at = timezone.now() if state == JobState.COMPLETED else None
        Job.objects.filter(pk=step.pk).update(state=state, attempts=1, completed_at=completed_at)
        assert indexes_holding(step.id) == expected
