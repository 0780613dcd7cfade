"""External runners: finish a job obtained from ``kathikon.claim()`` or ``claim_available()``.

    job = kathikon.claim_available("video")
    if job is not None:
        try:
            url = transcode(job.args["file"])
        except TranscoderBusy as exc:
            kathikon.fail(job, exc)                   # retryable with backoff, or dead
        else:
            kathikon.complete(job, {"url": url})

Each call writes the outcome exactly as a worker process writes a ``perform``
outcome (states, ``errors``, backoff, signals, batch completion), in one fenced
statement: it applies only while the job is still executing under the lease
the claim handed out. A job rescued since (an external runner has
``RESCUE_AFTER`` seconds) or changed by someone else is left alone and
``StaleLease`` says so.
"""

from __future__ import annotations

from typing import Any

from kathikon.exceptions import InvalidJob, InvalidState, StaleLease
from kathikon.executor import conclude, settle
from kathikon.jobspec import checked_delay, dump_value
from kathikon.models import Job
from kathikon.routing import for_loaded
from kathikon.states import EXECUTING_STATES
from kathikon.storage import vendor
from kathikon.workers import Discard, Retry, Snooze


def complete(job: Job, result: Any = None) -> Job:
    """The job succeeded: ``completed``, with ``result`` (a JSON value) stored as a worker's."""
    _check(job)
    if result is not None:
        dump_value(result, "result")
    return _write(job, result)


def fail(job: Job, error: str | Exception, *, retry_in: float | None = None) -> Job:
    """This attempt failed: ``retryable`` after the worker's backoff (or ``retry_in`` seconds),
    ``dead`` once the job has used its ``max_attempts``. ``error`` is recorded in ``errors``."""
    _check(job)
    if not isinstance(error, (str, Exception)) or isinstance(error, (Snooze, Discard)):
        raise InvalidJob(f"error must be a message or an exception, not {error!r}",
                         key="error")
    if retry_in is not None:
        checked_delay(retry_in, vendor.now(), "retry_in")
        error = Retry(error, in_seconds=float(retry_in))
    elif isinstance(error, str):
        error = Retry(error)
    return _write(job, error)


def discard(job: Job, reason: str = "discarded") -> Job:
    """Give up now: the job is ``dead`` with ``reason`` recorded, whatever attempts are left."""
    _check(job)
    return _write(job, Discard(reason))


def snooze(job: Job, seconds: float) -> Job:
    """Run the job again in ``seconds`` (``scheduled``); this attempt does not count."""
    _check(job)
    checked_delay(seconds, vendor.now(), "seconds")
    return _write(job, Snooze(float(seconds)))


def _check(job: Any) -> None:
    if not isinstance(job, Job):
        raise InvalidJob("pass the Job that kathikon.claim() or claim_available() returned, "
                         f"not {job!r}", key="job")
    if job.state not in EXECUTING_STATES:
        raise InvalidState(f"job {job.id.hex} is {job.state}, not claimed: claim it with "
                           "kathikon.claim() or claim_available() first", state=job.state)


def _write(job: Job, outcome: Any) -> Job:
    execution = conclude(job, outcome)  # error texts are made storable where they are built
    with for_loaded(job):  # the database it was claimed from (queues on several: routing)
        settle([execution])
    if not execution.written:
        raise StaleLease(f"job {job.id.hex}: lease {job.lease} is stale (the job was rescued "
                         "or changed since this claim); nothing was written")
    return job


__all__ = ["complete", "discard", "fail", "snooze"]
