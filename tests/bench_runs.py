"""Running ``python -m benchmarks.runner`` from a test, and reading its report.

Each run gets a database of its own (never the one a real ``make bench`` or another
test run uses) and returns the runner's JSON, after checking that it exited 0 and
recorded no phase error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def bench_vendor() -> str:
    """The benchmark vendor name of the test run's database."""
    from testproject.settings import DB

    return {"postgresql": "postgres", "mysql": "mariadb"}.get(DB, DB)


def run_bench(tmp_path: Path, vendor: str, tag: str, *args: str,
              timeout: float = 240) -> dict[str, Any]:
    """The runner's result for ``--db vendor --quick *args``; logs land in ``tmp_path``."""
    out = tmp_path / "result.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "BENCH_DB_NAME": f"kathikon_bench_{tag}{os.environ.get('KATHIKON_DB_SUFFIX', '')}"
                            f"_{os.getpid()}"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.runner", "--db", vendor, "--quick", *args,
         "--json", str(out), "--log-dir", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["errors"] == {}
    return result


def report_line(text: str, start: str) -> str | None:
    """The first line of a report table that starts with ``start``."""
    return next((line for line in text.splitlines() if line.startswith(start)), None)
