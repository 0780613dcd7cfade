"""Fixtures for scheduling tests: an injectable clock and a helper that runs queued jobs."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

import kathikon
from kathikon.executor import execute_job

UTC = dt.timezone.utc


class Clock:
    """A frozen clock for services: ``clock()`` returns ``now``; ``advance(**timedelta)``."""

    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, **delta: float) -> dt.datetime:
        self.now += dt.timedelta(**delta)
        return self.now

    def set(self, now: dt.datetime) -> dt.datetime:
        self.now = now
        return now


@pytest.fixture
def clock() -> Clock:
    return Clock(dt.datetime(2026, 5, 13, 9, 59, 30, tzinfo=UTC))


def drain(queue: str = "default", limit: int = 10_000) -> int:
    """Claim and run every available job of ``queue`` in this process; returns how many ran."""
    ran = 0
    while ran < limit:
        job = kathikon.claim_available(queue)
        if job is None:
            return ran
        execute_job(job)
        ran += 1
    return ran


@pytest.fixture
def run_queue() -> Any:
    return drain


# Whole-process tests reuse the runtime's fixture (real ``kathikon_worker`` processes, killed
# at teardown, logs printed on failure).
from tests.runtime.conftest import (  # noqa: E402
    pytest_runtest_makereport,
    wait_until,
    worker_processes,
)

__all__ = ["Clock", "drain", "pytest_runtest_makereport", "wait_until", "worker_processes"]
