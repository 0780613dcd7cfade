"""benchmarks.report and benchmarks.procs: the drain's cores-busy figure and what it bounds."""

from __future__ import annotations

import os
import time

from benchmarks import report
from benchmarks.procs import machine_busy_seconds

ROW = "| cores busy during the drain, 1 / 2 processes (of the machine's) |"


def _results(**drains: dict) -> dict:
    return {"vendors": {"postgres": {"phases": {"drain": drains}}}}


def _row(results: dict) -> str | None:
    return next((line for line in report.table(results).splitlines()
                 if line.startswith(ROW)), None)


def test_cores_row_gives_the_ceiling_one_process_leaves_a_second():
    # The machine's core count is the one the drain recorded, not the one rendering it.
    row = _row(_results(p1={"rate": 20000, "cores_busy": 3.2, "cores": 4},
                        p2={"rate": 24000, "cores_busy": 3.8, "cores": 4}))
    assert row == f"{ROW} 3.20 / 3.80 of 4: 2 processes can reach at most 1.25x of 1 here |"


def test_cores_row_is_left_out_without_both_drains():
    assert _row(_results(p1={"rate": 20000, "cores_busy": 1.6, "cores": 2})) is None
    assert _row(_results(p1={"rate": 20000}, p2={"rate": 24000})) is None


def test_machine_reading_counts_a_busy_core():
    busy0, started = machine_busy_seconds(), time.monotonic()
    while time.monotonic() - started < 0.3:  # keep one core busy
        pass
    busy, wall = machine_busy_seconds() - busy0, time.monotonic() - started
    assert busy >= 0.2  # at least most of the spin
    assert busy <= (os.cpu_count() or 1) * wall + 0.02  # never more than every core (a tick)
