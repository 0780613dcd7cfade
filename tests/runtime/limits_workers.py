"""Workers for the limits' whole-process tests: each run appends its wall-clock span to a file.

One line per run, ``<job hex> <partition> <start> <end>`` (one short ``write`` on an
``O_APPEND`` file, so lines from several processes never interleave).
"""

from __future__ import annotations

import time
from pathlib import Path

import kathikon


class Timed(kathikon.Worker):
    def perform(self, job: kathikon.Job) -> None:
        start = time.time()
        time.sleep(job.args.get("seconds", 0.5))
        end = time.time()
        with open(job.args["log"], "a") as log:
            log.write(f"{job.id.hex} {job.args.get('account', '-')} {start:.6f} {end:.6f}\n")


def spans(path: str | Path) -> list[tuple[str, str, float, float]]:
    """``(job hex, partition, start, end)`` of every run recorded so far."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        job, account, start, end = line.split()
        rows.append((job, account, float(start), float(end)))
    return rows


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end at t closes before a start at t)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
                    key=lambda event: (event[0], event[1]))
    open_now = peak = 0
    for _, step in events:
        open_now += step
        peak = max(peak, open_now)
    return peak
