"""Workers whose result cannot be stored (issue 26, item 3), importable by real worker processes.

Each appends one line per run to the file ``args["log"]`` *before* it returns, so a test
counts how many times ``perform`` ran. ``args["case"]`` picks the result from ``RESULTS``;
``max_attempts = 3`` and no backoff, so a result that failed the attempt would show up at
once as more runs.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.db import transaction

import kathikon
from kathikon import compat
from kathikon.storable import MAX_RESULT_BYTES


def nested(depth: int) -> list[Any]:
    """A list ``depth`` levels deep (the outer list counts)."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


# case: (the result perform returns, the marker's reason, the marker's type)
RESULTS: dict[str, tuple[Callable[[], Any], str, str]] = {
    "set": (lambda: {1, 2, 3}, "not_json", "builtins.set"),
    "object": (object, "not_json", "builtins.object"),
    "int_5000_digits": (lambda: 10**4999, "not_json", "builtins.int"),
    "nan": (lambda: {"ratio": math.nan}, "not_json", "builtins.dict"),
    "inf": (lambda: [math.inf], "not_json", "builtins.list"),
    "nul": (lambda: {"text": "a\x00b"}, "bad_text", "builtins.dict"),
    "surrogate": (lambda: ["\ud800"], "bad_text", "builtins.list"),
    "deep_40": (lambda: {"tree": nested(39)}, "too_deep", "builtins.dict"),
    "deep_nul": (lambda: [nested(5000), "a\x00b"], "too_deep", "builtins.list"),
    "huge": (lambda: "x" * (MAX_RESULT_BYTES + 1), "too_large", "builtins.str"),
}


def record_run(job: Any, log: str) -> None:
    with Path(log).open("a") as file:
        file.write(f"{job.id.hex} {job.attempts}\n")


def runs(log: Path) -> dict[str, int]:
    """How many times each job id ran, from the log the workers append to."""
    counts: dict[str, int] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            job_id = line.split()[0]
            counts[job_id] = counts.get(job_id, 0) + 1
    return counts


class UnstorableResult(kathikon.Worker):
    max_attempts = 3

    def backoff(self, job: kathikon.Job) -> float:
        return 0

    def perform(self, job: kathikon.Job) -> Any:
        record_run(job, job.args["log"])
        return RESULTS[job.args["case"]][0]()


class AsyncUnstorableResult(UnstorableResult):
    async def perform(self, job: kathikon.Job) -> Any:  # type: ignore[override]
        await asyncio.sleep(0)
        record_run(job, job.args["log"])
        return RESULTS[job.args["case"]][0]()


class CompletesThenReturnsASet(UnstorableResult):
    """Completes itself in its own transaction, then returns what cannot be stored."""

    def perform(self, job: kathikon.Job) -> Any:
        with transaction.atomic():
            record_run(job, job.args["log"])
            kathikon.complete_in_transaction(job, {"completed": "in its transaction"})
        return {1, 2, 3}


if compat.AVAILABLE:
    @compat.task(takes_context=True, max_attempts=3, backoff=0)
    def unstorable_task(context: Any, log: str, case: str) -> Any:
        """A Django Task returning what cannot be stored; each run logged as a job's is."""
        with Path(log).open("a") as file:
            file.write(f"{context.task_result.id} {context.attempt}\n")
        return RESULTS[case][0]()
