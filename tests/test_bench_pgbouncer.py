"""benchmarks.pgbouncer_drain and its report row: a drain behind PgBouncer against a
direct one, in the same run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import report

ROOT = Path(__file__).resolve().parent.parent
ROW = ("| drain behind PgBouncer (transaction mode, direct LISTEN) vs straight to PostgreSQL, "
       "1 `kathikon_worker` (jobs/s) |")


def _line(text: str, start: str) -> str | None:
    return next((line for line in text.splitlines() if line.startswith(start)), None)


def test_the_report_row_gives_both_rates_and_their_ratio():
    phase = {"n": 10_000, "pool_size": 10, "pgbouncer": {"rate": 9_000},
             "direct": {"rate": 10_000}, "ratio": 0.9}
    table = report.table({"vendors": {"postgres": {"phases": {"pgbouncer": phase}}}})
    assert _line(table, ROW) == f"{ROW} 9,000 vs 10,000 (90%, pool 10) |"
    skipped = report.table({"vendors": {"postgres": {"phases": {"pgbouncer": {"skipped": "x"}}}}})
    assert _line(skipped, ROW) is None


@pytest.mark.slow
def test_pgbouncer_phase_drains_through_a_real_pgbouncer(tmp_path, pgbouncer):
    """The session's PgBouncer fixture only proves that the binary is here (CI fails
    without it); the phase starts its own."""
    out = tmp_path / "result.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "BENCH_DB_NAME": f"kathikon_bench_pgb{os.environ.get('KATHIKON_DB_SUFFIX', '')}"
                            f"_{os.getpid()}"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.runner", "--db", "postgres", "--quick", "--only",
         "pgbouncer", "--size", "drain=200", "--json", str(out), "--log-dir", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["errors"] == {}
    phase = result["phases"]["pgbouncer"]
    for kind in ("direct", "pgbouncer"):
        assert len(phase[kind]["runs"]) == 2  # direct, pooled, pooled, direct
        assert all(run["completed"] == 200 for run in phase[kind]["runs"])
    assert phase["ratio"] is not None
    logs = "".join(path.read_text(errors="replace") for path in tmp_path.rglob("*.log"))
    assert "instant pickup via LISTEN" in logs and "no LISTEN" not in logs
