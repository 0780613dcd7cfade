"""benchmarks.report and benchmarks.procs: the drain's cores-busy figure and what it bounds."""

from __future__ import annotations

import os
import time

from benchmarks import report
from benchmarks.procs import machine_cpu_seconds


def _drains(one: float, two: float) -> dict:
    return {"phases": {"drain": {"p1": {"rate": 20000, "n": 100000, "cores_busy": one},
                                 "p2": {"rate": 24000, "n": 100000, "cores_busy": two}}}}


def test_cores_row_gives_the_ceiling_one_process_leaves_a_second():
    cores = os.cpu_count() or 1
    text = report._cores(_drains(cores * 0.8, cores * 0.95))
    assert text.startswith(f"{cores * 0.8:.2f} / {cores * 0.95:.2f} of {cores}:")
    assert text.endswith("at most 1.25x of 1 here")


def test_cores_row_is_a_dash_without_both_drains():
    assert report._cores({"phases": {"drain": {"p1": {"cores_busy": 1.5}}}}) == "-"
    assert report._cores({}) == "-"


def test_machine_reading_counts_a_busy_core():
    busy0, all0 = machine_cpu_seconds()
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:  # keep one core busy
        pass
    busy1, all1 = machine_cpu_seconds()
    busy, every = busy1 - busy0, all1 - all0
    assert busy >= 0.2  # at least most of the spin
    assert busy <= every + 0.02  # never more than all (a fully busy box: equal, give or
    # take the rounding of two sums of clock ticks)
