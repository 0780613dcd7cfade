"""Interim in-process runner for the demo (the runtime issue replaces it with kathikon_worker)."""

from __future__ import annotations

import time


def run_until_idle(timeout: float = 15.0) -> None:
    from kathikon import storage
    from kathikon.executor import run_job, settle
    from kathikon.models import Job

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        storage.promote_scheduled()
        jobs = storage.claim_jobs("default", 10, "demo")
        if jobs:
            for execution in settle([run_job(job) for job in jobs]):
                print(f"   {execution.job.worker.rsplit('.', 1)[-1]:<12} attempt "
                      f"{execution.job.attempts}: {execution.kind}")
            continue
        soon = Job.objects.filter(state__in=["retryable", "scheduled"],
                                  available_at__lte=_soon()).exists()
        if not soon:
            return
        time.sleep(0.2)


def _soon():
    import datetime as dt

    from django.utils import timezone

    return timezone.now() + dt.timedelta(seconds=5)
