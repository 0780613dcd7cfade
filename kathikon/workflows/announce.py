"""Internal: the signals of workflows, sent after the change they report has been written."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kathikon import signals
from kathikon.jobspec import worker_class
from kathikon.models import Workflow
from kathikon.storage.settle import Settled
from kathikon.storage.workflows import jobs_by_ids
from kathikon.workers import Worker

logger = logging.getLogger("kathikon")


def announce(settled: Settled | None) -> None:
    """``step_released`` per workflow and ``workflow_finished`` per finished workflow."""
    if not settled:
        return
    if settled.cancelled and signals.job_cancelled.receivers:  # by a policy or a person
        for job in jobs_by_ids(settled.cancelled):
            signals.send(signals.job_cancelled, _sender(job.worker), job=job)
    for workflow_id, steps in settled.released.items():
        signals.send(signals.step_released, Workflow,
                     workflow_id=workflow_id.hex if workflow_id else "", steps=list(steps))
    for workflow in settled.finished:
        logger.info("kathikon workflow %s (%s) finished: %s", workflow.name, workflow.id.hex,
                    workflow.status)
        signals.send(signals.workflow_finished, Workflow, workflow=workflow,
                     status=workflow.status)


def _sender(path: str) -> type:
    try:
        return worker_class(path)[1]
    except Exception:  # a class this process cannot import: the base class
        return Worker


def announce_started(workflows: Iterable[Workflow]) -> None:
    for workflow in workflows:
        signals.send(signals.workflow_started, Workflow, workflow=workflow,
                     steps=workflow.steps_total)
