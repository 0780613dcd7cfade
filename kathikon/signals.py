"""Kathikon's telemetry: Django signals sent for every job, queue, batch, cron and node event.

Connect receivers as usual (``@receiver(kathikon.signals.job_failed)``). A
receiver that raises is logged and never breaks a job. Signals are sent when
the change is written; inside your own ``transaction.atomic()`` (inserts,
cancels) that is before your commit.

=================  ==================  ==================================================
signal             sender              kwargs
=================  ==================  ==================================================
job_inserted       worker class        job
job_started        worker class        job, queue_time
job_completed      worker class        job, result, duration, queue_time
job_failed         worker class        job, error, exception, duration, queue_time, retry_at
                                       (``None`` when the job is now dead)
job_discarded      worker class        job, error, duration, queue_time (job is now dead)
job_snoozed        worker class        job, seconds, duration, queue_time
job_cancelled      worker class        job
job_rescued        worker class        job, node (the vanished node), state (new state)
queue_paused       Queue model         queue (name)
queue_resumed      Queue model         queue (name)
queue_limited      Queue model         queue (name), node, limit ("global_limit",
                                       "rate_limit" or "partition"), claims (held claims
                                       since the last send), since (seconds); at most once
                                       per second per queue and node
batch_completed    Batch model         batch, callback_job, completed, dead, cancelled
workflow_started   Workflow model      workflow (the row; a sub-workflow has
                                       ``parent_workflow_id``), steps (how many)
step_released      Workflow model      workflow_id (hex), steps (list of ``(job id hex,
                                       step name)`` released together: their deps
                                       settled, or a person released a held step)
workflow_finished  Workflow model      workflow (the row), status ("completed", "failed"
                                       or "cancelled")
cron_enqueued      CronSchedule model  schedule, job, tick
worker_started     Node model          node (name), queues (name → concurrency)
worker_stopped     Node model          node (name)
=================  ==================  ==================================================

``duration`` and ``queue_time`` are seconds (float): time in ``perform`` and
time from due (``available_at``) to start.
"""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal

logger = logging.getLogger("kathikon")

job_inserted = Signal()
job_started = Signal()
job_completed = Signal()
job_failed = Signal()
job_discarded = Signal()
job_snoozed = Signal()
job_cancelled = Signal()
job_rescued = Signal()
queue_paused = Signal()
queue_resumed = Signal()
queue_limited = Signal()
batch_completed = Signal()
workflow_started = Signal()
step_released = Signal()
workflow_finished = Signal()
cron_enqueued = Signal()
worker_started = Signal()
worker_stopped = Signal()

ALL_SIGNALS: dict[str, Signal] = {
    name: value for name, value in globals().items() if isinstance(value, Signal)
}


def send(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Send ``signal``; a receiver that raises is logged, never propagated."""
    # No receiver at all (the common case, twice per job): skip has_listeners(), which takes
    # the signal's lock and walks its receivers; Django's own send() checks the same first.
    if not signal.receivers or not signal.has_listeners(sender):
        return
    for receiver, response in signal.send_robust(sender, **kwargs):
        if isinstance(response, Exception):
            logger.error("kathikon signal receiver %r failed", receiver,
                         exc_info=(type(response), response, response.__traceback__))
