"""Kathikon: durable, database-backed background jobs for Django.

    import kathikon

    class SendWelcome(kathikon.Worker):
        queue = "emails"

        def perform(self, job):
            send_welcome(job.args["user_id"])

    kathikon.insert(SendWelcome, {"user_id": 42})

The names that touch the database (``insert``, ``fetch``, ``Job``, …) load on
first use, so ``import kathikon`` is safe before Django's apps are ready
(e.g. in a module that defines workers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kathikon.backoff import backoff_seconds
from kathikon.exceptions import (
    ActionNotAllowed,
    BatchClosed,
    BatchNotFound,
    CronNotFound,
    EventLoopDied,
    ExecutorThreadDied,
    InvalidJob,
    InvalidQueue,
    InvalidSchedule,
    InvalidState,
    InvalidWorkflow,
    JobExecuting,
    JobNotFound,
    JobTimeout,
    KathikonError,
    NodeVanished,
    NotMigrated,
    StaleLease,
    TransactionLeftOpen,
    UnstorableOutcome,
    WorkerCrashed,
    WorkflowFinished,
    WorkflowNotFound,
)
from kathikon.states import JobState
from kathikon.unique import Unique
from kathikon.workers import Discard, Retry, Snooze, Worker

if TYPE_CHECKING:
    from kathikon.api import (
        InsertResult,
        all,
        cancel,
        claim,
        claim_available,
        dead_jobs,
        fetch,
        history,
        insert,
        insert_many,
        pause_queue,
        rerun,
        resume_queue,
        retry,
        schedule,
        set_queue_limits,
        start_queue,
        status,
    )
    from kathikon.completion import complete_in_transaction
    from kathikon.models import Job
    from kathikon.runners import complete, discard, fail, snooze
    from kathikon.workflows import Workflow

__version__ = "0.1.0"

_LAZY = {
    **{name: "kathikon.api" for name in (
        "InsertResult", "all", "cancel", "claim", "claim_available", "dead_jobs", "fetch",
        "history", "insert", "insert_many", "pause_queue", "rerun", "resume_queue", "retry",
        "schedule", "set_queue_limits", "start_queue", "status",
    )},
    **{name: "kathikon.aapi" for name in (
        "aall", "acancel", "aclaim", "aclaim_available", "adead_jobs", "afetch", "ahistory",
        "ainsert", "ainsert_many", "apause_queue", "arerun", "aresume_queue", "aretry",
        "aschedule", "aset_queue_limits", "astart_queue", "astatus",
    )},
    **{name: "kathikon.runners" for name in ("complete", "discard", "fail", "snooze")},
    **{name: "kathikon.aapi" for name in ("acomplete", "adiscard", "afail", "asnooze")},
    "Job": "kathikon.models",
    "complete_in_transaction": "kathikon.completion",
    "Batch": "kathikon.batch",
    "Workflow": "kathikon.workflows",
}


def __getattr__(name: str) -> Any:
    from importlib import import_module

    if name in ("cron", "workflows"):  # public submodules, loaded on first use
        return import_module(f"kathikon.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kathikon' has no attribute {name!r}")

    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ActionNotAllowed", "Batch", "BatchClosed", "BatchNotFound", "CronNotFound", "Discard",
    "EventLoopDied", "ExecutorThreadDied", "InsertResult", "InvalidJob", "InvalidQueue",
    "InvalidSchedule", "InvalidState", "InvalidWorkflow", "Job", "JobExecuting", "JobNotFound",
    "JobState", "JobTimeout", "KathikonError", "NodeVanished", "NotMigrated", "Retry", "Snooze",
    "StaleLease", "TransactionLeftOpen", "Unique", "UnstorableOutcome", "Worker", "WorkerCrashed",
    "Workflow", "WorkflowFinished", "WorkflowNotFound", "__version__", "aall", "acancel", "aclaim",
    "aclaim_available", "acomplete", "adead_jobs", "adiscard", "afail", "afetch", "ahistory",
    "ainsert", "ainsert_many", "all", "apause_queue", "arerun", "aresume_queue", "aretry",
    "aschedule", "aset_queue_limits", "asnooze", "astart_queue", "astatus", "backoff_seconds",
    "cancel", "claim", "claim_available", "complete", "complete_in_transaction", "cron",
    "dead_jobs", "discard", "fail", "fetch", "history", "insert", "insert_many", "pause_queue",
    "rerun", "resume_queue", "retry", "schedule", "set_queue_limits", "snooze", "start_queue",
    "status", "workflows"
]
