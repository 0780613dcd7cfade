"""Workers for the lifeline's whole-process tests: slow jobs that record every execution.

Each execution appends lines to the file named in ``args["log"]`` (one short
``write`` on an ``O_APPEND`` file per line, so lines from several processes never
interleave): ``<job hex> <node> <attempt> start`` when ``perform`` begins and
``… end`` when it returns.
"""

from __future__ import annotations

import time
from pathlib import Path

import kathikon


def record(path: str, job: kathikon.Job, event: str) -> None:
    with open(path, "a") as log:
        log.write(f"{job.id.hex} {job.attempted_by} {job.attempts} {event}\n")


def executions(path: str | Path) -> list[tuple[str, str, int, str]]:
    """``(job hex, node, attempt, event)`` for every line recorded so far."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        job, node, attempt, event = line.split()
        rows.append((job, node, int(attempt), event))
    return rows


class SlowRecorded(kathikon.Worker):
    """Sleeps ``args["seconds"]`` between recording its start and its end."""

    max_attempts = 5

    def perform(self, job: kathikon.Job) -> dict[str, object]:
        record(job.args["log"], job, "start")
        time.sleep(job.args.get("seconds", 1.0))
        record(job.args["log"], job, "end")
        return {"node": job.attempted_by, "attempt": job.attempts}
