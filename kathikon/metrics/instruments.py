"""The counters and histograms a worker process keeps, fed by Kathikon's signals.

The metric objects are prometheus_client's, registered once in its default registry
when this module is imported (the library keeps their values); :func:`install`
connects the receivers, once per process however often it is called.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Histogram

from kathikon import signals

# Seconds: from a few milliseconds (the overhead of a no-op job) to an hour.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
           300.0, 900.0, 3600.0)

JOBS_FINISHED = Counter(
    "kathikon_jobs_finished", "Job attempts that ended, by the state the job went to "
    "(completed, retryable, dead, scheduled after a snooze, cancelled), from the worker "
    "processes' signals.", ["queue", "worker", "state"])
RUN_SECONDS = Histogram(
    "kathikon_job_run_seconds", "Seconds an attempt spent in perform.", ["queue"],
    buckets=BUCKETS)
QUEUE_WAIT_SECONDS = Histogram(
    "kathikon_job_queue_wait_seconds", "Seconds from when an attempt was due (available_at) "
    "to its start.", ["queue"], buckets=BUCKETS)


def install() -> None:
    """Count this process's jobs from now on (idempotent: each receiver connects once)."""
    for name in ("completed", "failed", "discarded", "snoozed"):
        getattr(signals, f"job_{name}").connect(_attempt_ended, weak=False,
                                                dispatch_uid=f"kathikon.metrics.{name}")
    for name in ("cancelled", "rescued"):
        getattr(signals, f"job_{name}").connect(_job_ended, weak=False,
                                                dispatch_uid=f"kathikon.metrics.{name}")
    signals.job_started.connect(_started, weak=False, dispatch_uid="kathikon.metrics.started")


def _attempt_ended(sender: Any, job: Any, duration: float = 0.0, **kwargs: Any) -> None:
    JOBS_FINISHED.labels(job.queue, job.shown_worker, job.state).inc()
    RUN_SECONDS.labels(job.queue).observe(max(0.0, duration))


def _job_ended(sender: Any, job: Any, **kwargs: Any) -> None:
    """A cancel, or a rescue (the attempt of a vanished node ended without a run time)."""
    JOBS_FINISHED.labels(job.queue, job.shown_worker, job.state).inc()


def _started(sender: Any, job: Any, queue_time: float = 0.0, **kwargs: Any) -> None:
    QUEUE_WAIT_SECONDS.labels(job.queue).observe(max(0.0, queue_time))
