"""Poison workers for the fault tests: each ends with an outcome a database would refuse,
or with a ``BaseException``. Importable by real worker processes (``tests`` is on their path).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import kathikon
from kathikon import Batch


class Poison(kathikon.Worker):
    """``args["case"]`` picks the outcome; the backoff is long so the job stays retryable."""

    max_attempts = 3

    def backoff(self, job: kathikon.Job) -> float:
        return 3600

    def perform(self, job: kathikon.Job) -> Any:
        case = job.args["case"]
        if case == "nul":
            raise ValueError("bad \x00 byte")
        if case == "surrogate":
            raise ValueError("lone \ud800 surrogate")
        if case == "nan":
            return {"value": float("nan")}
        if case == "retry_far":
            raise kathikon.Retry("come back much later", in_seconds=1e12)
        if case == "snooze_inf":
            return kathikon.Snooze(float("inf"))
        if case == "long":
            raise ValueError("HEAD" + "x" * 1_000_000 + "TAIL")
        if case == "huge":
            raise ValueError("x" * 140_000_000)
        if case == "system_exit":
            raise SystemExit(3)
        if case == "keyboard_interrupt":
            raise KeyboardInterrupt
        raise AssertionError(f"unknown case {case!r}")


class InfiniteBackoff(kathikon.Worker):
    """Fails; its backoff is infinite (clamped to ``MAX_DELAY``)."""

    max_attempts = 3

    def backoff(self, job: kathikon.Job) -> float:
        return float("inf")

    def perform(self, job: kathikon.Job) -> Any:
        raise ValueError("failed, with an infinite backoff")


class NanBackoff(InfiniteBackoff):
    """Fails; its backoff is NaN (the default backoff is used)."""

    def backoff(self, job: kathikon.Job) -> float:
        return float("nan")


class BatchParent(kathikon.Worker):
    """Opens a batch with one child and returns without closing it (the parent is held).

    With ``args["gate"]`` it first writes ``<gate>.started`` and waits for ``<gate>.go``.
    """

    def perform(self, job: kathikon.Job) -> Any:
        gate = job.args.get("gate")
        if gate:
            Path(f"{gate}.started").write_text("1")
            deadline = time.monotonic() + 30
            while not Path(f"{gate}.go").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        batch = Batch.open(job.id, on_complete=None)
        Batch.append(batch.id, [("testproject.demo.workers.Record", {"child": True})])
        return {"batch": batch.id}
