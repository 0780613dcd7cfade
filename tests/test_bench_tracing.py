"""benchmarks.tracing_drain and its report row: what KATHIKON["TRACING"] costs a drain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import report

ROOT = Path(__file__).resolve().parent.parent
ROW = ("| drain with `TRACING` on (OpenTelemetry SDK, spans dropped) vs off, 1 "
       "`kathikon_worker` (jobs/s) |")


def _line(text: str, start: str) -> str | None:
    return next((line for line in text.splitlines() if line.startswith(start)), None)


def test_the_report_row_gives_both_rates_and_the_cost_per_job():
    phase = {"n": 10_000, "on": {"rate": 8_000}, "off": {"rate": 10_000},
             "overhead_us_per_job": 25.0, "worker_cpu_overhead_us_per_job": 31.0}
    table = report.table({"vendors": {"postgres": {"phases": {"tracing": phase}}}})
    assert _line(table, ROW) == f"{ROW} 8,000 vs 10,000 (+25 us/job, worker CPU +31 us/job) |"
    skipped = report.table({"vendors": {"postgres": {"phases": {"tracing": {"skipped": "x"}}}}})
    assert _line(skipped, ROW) is None


@pytest.mark.slow
def test_tracing_phase_runs_with_real_workers(tmp_path):
    pytest.importorskip("opentelemetry.sdk.trace")
    from testproject.settings import DB

    vendor = {"postgresql": "postgres", "mysql": "mariadb"}.get(DB, DB)
    out = tmp_path / "result.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "BENCH_DB_NAME": f"kathikon_bench_tr{os.environ.get('KATHIKON_DB_SUFFIX', '')}"
                            f"_{os.getpid()}"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.runner", "--db", vendor, "--quick", "--only",
         "tracing", "--size", "drain=200", "--json", str(out), "--log-dir", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["errors"] == {}
    phase = result["phases"]["tracing"]
    for kind in ("on", "off"):
        assert len(phase[kind]["runs"]) == 2  # off, on, on, off
        assert all(run["completed"] == 200 for run in phase[kind]["runs"])
    assert phase["overhead_us_per_job"] is not None
