"""The benchmark suite still runs: its smallest piece (enqueue + bulk, tiny N) on this database.

Not a performance test: nothing here looks at the figures beyond "a rate came back".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENDORS = {"postgres": "postgres", "postgresql": "postgres", "mariadb": "mariadb",
           "mysql": "mariadb", "sqlite": "sqlite"}


@pytest.mark.slow
def test_benchmark_enqueue_phases_run(tmp_path):
    from testproject.settings import DB

    vendor = VENDORS[DB]
    out = tmp_path / "result.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           # Its own database, never the one a real `make bench` or another test run uses.
           "BENCH_DB_NAME": f"kathikon_bench_smoke{os.environ.get('KATHIKON_DB_SUFFIX', '')}"
                            f"_{os.getpid()}"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.runner", "--db", vendor, "--quick",
         "--only", "enqueue,bulk", "--size", "single=50", "--size", "bulk=200",
         "--json", str(out), "--log-dir", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["errors"] == {}
    assert result["phases"]["enqueue"]["n"] == 50
    assert result["phases"]["enqueue"]["rate"] > 0
    assert result["phases"]["bulk"]["rate"] > 0
