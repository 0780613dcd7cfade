"""benchmarks.partition_drain's figures and their report cells: the partitioned table
beside a big history against an empty one."""

from __future__ import annotations

import pytest

from benchmarks import partition_drain, report


def _turns(key: str, full: list[float], empty: list[float]) -> tuple[list[dict], list[dict]]:
    return [{key: value} for value in full], [{key: value} for value in empty]


def test_the_paired_ratio_is_the_median_of_each_turns_own_ratio():
    # the machine twice as busy in the middle turn: each turn's two runs still agree
    full, empty = _turns("claim_ms_median", [1.0, 2.2, 1.1], [1.0, 2.0, 1.0])
    assert partition_drain.paired_ratio(full, empty, "claim_ms_median") == pytest.approx(1.1)


def test_the_paired_ratio_skips_runs_without_the_figure_and_needs_a_pair():
    full, empty = _turns("rate", [900.0, 0.0], [1000.0, 800.0])
    assert partition_drain.paired_ratio(full, empty, "rate") == pytest.approx(0.9)
    assert partition_drain.paired_ratio([], empty, "rate") is None
    assert partition_drain.paired_ratio(full, empty, "claim_work_ms_median") is None


def test_the_claim_cell_shows_the_paired_ratios_when_the_run_has_them():
    phase = {"partitioned_history": {"claim_ms_median": 0.86, "rate": 19_000},
             "partitioned_empty": {"claim_ms_median": 0.77, "rate": 18_700},
             "plain_empty": {"rate": 15_000}, "claim_ratio": 1.12, "drain_ratio": 1.03}
    run = {"phases": {"partitioned": phase}}
    [claim] = [cell for name, cell in report.ROWS if "partition" in name and "claim" in name]
    assert claim(run) == "0.86 vs 0.77 ms (1.12x)"  # a run from before the paired figures
    phase.update(claim_paired_ratio=0.99, claim_work_paired_ratio=1.01)
    assert claim(run) == (
        "0.86 vs 0.77 ms (1.12x; paired 0.99x, without the commit's flush 1.01x)")
