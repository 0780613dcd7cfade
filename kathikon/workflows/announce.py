"""Internal: the signals of workflows, sent after the change they report has been written."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kathikon import signals
from kathikon.models import Workflow
from kathikon.storage.settle import Settled

logger = logging.getLogger("kathikon")


def announce(settled: Settled | None) -> None:
    """``step_released`` per workflow and ``workflow_finished`` per finished workflow."""
    if not settled:
        return
    for workflow_id, steps in settled.released.items():
        signals.send(signals.step_released, Workflow,
                     workflow_id=workflow_id.hex if workflow_id else "", steps=list(steps))
    for workflow in settled.finished:
        logger.info("kathikon workflow %s (%s) finished: %s", workflow.name, workflow.id.hex,
                    workflow.status)
        signals.send(signals.workflow_finished, Workflow, workflow=workflow,
                     status=workflow.status)


def announce_started(workflows: Iterable[Workflow]) -> None:
    for workflow in workflows:
        signals.send(signals.workflow_started, Workflow, workflow=workflow,
                     steps=workflow.steps_total)
