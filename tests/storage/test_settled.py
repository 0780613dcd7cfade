"""kathikon.storage.settled: the members an ack batch makes, and their workflow counts."""

from __future__ import annotations

import uuid

from kathikon.states import JobState
from kathikon.storage.settled import Member, step_members, workflow_counts


def test_step_members_are_the_members_their_fields_name():
    step, other, workflow = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    members = step_members([(step, workflow, JobState.COMPLETED), (other, workflow, JobState.DEAD),
                            (uuid.uuid4(), None, JobState.COMPLETED)])  # not a step: left out
    assert members == [Member(step, workflow, False), Member(other, workflow, True)]
    assert members[1].id == other and members[1].parent == workflow and members[1].failed
    assert not members[1].is_workflow and not members[1].undo


def test_workflow_counts_group_equal_ids_held_by_distinct_uuid_objects():
    workflow, other = uuid.uuid4(), uuid.uuid4()
    frontier = [Member(uuid.uuid4(), uuid.UUID(workflow.hex), False) for _ in range(3)]
    frontier += [Member(uuid.uuid4(), uuid.UUID(workflow.hex), True),
                 Member(uuid.uuid4(), other, True, undo=True),
                 Member(uuid.uuid4(), None, False)]
    assert workflow_counts(frontier) == {workflow: [-4, 1], other: [1, -1]}
