"""benchmarks.tracing_drain and its report row: what KATHIKON["TRACING"] costs a drain."""

from __future__ import annotations

import pytest

from benchmarks import report
from tests.bench_runs import bench_vendor, report_line, run_bench

ROW = ("| drain with `TRACING` on (OpenTelemetry SDK, spans dropped) vs off, 1 "
       "`kathikon_worker` (jobs/s) |")



def test_the_report_row_gives_both_rates_and_the_cost_per_job():
    phase = {"n": 10_000, "on": {"rate": 8_000}, "off": {"rate": 10_000},
             "overhead_us_per_job": 25.0, "worker_cpu_overhead_us_per_job": 31.0}
    table = report.table({"vendors": {"postgres": {"phases": {"tracing": phase}}}})
    assert report_line(table, ROW) == f"{ROW} 8,000 vs 10,000 (+25 us/job, worker CPU +31 us/job) |"
    skipped = report.table({"vendors": {"postgres": {"phases": {"tracing": {"skipped": "x"}}}}})
    assert report_line(skipped, ROW) is None


@pytest.mark.slow
def test_tracing_phase_runs_with_real_workers(tmp_path):
    pytest.importorskip("opentelemetry.sdk.trace")
    result = run_bench(tmp_path, bench_vendor(), "tr", "--only", "tracing",
                       "--size", "drain=200")
    phase = result["phases"]["tracing"]
    for kind in ("on", "off"):
        assert len(phase[kind]["runs"]) == 2  # off, on, on, off
        assert all(run["completed"] == 200 for run in phase[kind]["runs"])
    assert phase["overhead_us_per_job"] is not None
