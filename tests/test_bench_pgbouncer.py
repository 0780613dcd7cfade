"""benchmarks.pgbouncer_drain and its report row: a drain behind PgBouncer against a
direct one, in the same run."""

from __future__ import annotations

import pytest

from benchmarks import report
from tests.bench_runs import report_line, run_bench

ROW = ("| drain behind PgBouncer (transaction mode, direct LISTEN) vs straight to PostgreSQL, "
       "1 `kathikon_worker` (jobs/s) |")



def test_the_report_row_gives_both_rates_and_their_ratio():
    phase = {"n": 10_000, "pool_size": 10, "pgbouncer": {"rate": 9_000},
             "direct": {"rate": 10_000}, "ratio": 0.9}
    table = report.table({"vendors": {"postgres": {"phases": {"pgbouncer": phase}}}})
    assert report_line(table, ROW) == f"{ROW} 9,000 vs 10,000 (90%, pool 10) |"
    skipped = report.table({"vendors": {"postgres": {"phases": {"pgbouncer": {"skipped": "x"}}}}})
    assert report_line(skipped, ROW) is None


@pytest.mark.slow
def test_pgbouncer_phase_drains_through_a_real_pgbouncer(tmp_path, pgbouncer):
    """The session's PgBouncer fixture only proves that the binary is here (CI fails
    without it); the phase starts its own."""
    result = run_bench(tmp_path, "postgres", "pgb", "--only", "pgbouncer",
                       "--size", "drain=200")
    phase = result["phases"]["pgbouncer"]
    for kind in ("direct", "pgbouncer"):
        assert len(phase[kind]["runs"]) == 2  # direct, pooled, pooled, direct
        assert all(run["completed"] == 200 for run in phase[kind]["runs"])
    assert phase["ratio"] is not None
    logs = "".join(path.read_text(errors="replace") for path in tmp_path.rglob("*.log"))
    assert "instant pickup via LISTEN" in logs and "no LISTEN" not in logs
