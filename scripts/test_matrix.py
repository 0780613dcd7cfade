#!/usr/bin/env python3
"""Run the whole suite on every database this machine can reach, on both Django lines.

    primary   .venv     (Python 3.13, Django 6.x): every test, on SQLite, PostgreSQL, MariaDB
    lts       .venv-52  (Python 3.11, Django 5.2): every test but the whole-process and
                        browser ones (those exercise the OS and Chromium, not Django)

With CI=true every database and both virtualenvs must be there, or the run fails.
Prints one line per run and a closing 'N passed, N failed, N skipped' line.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def reachable(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def main(argv: list[str]) -> int:
    extra = argv[1:]
    databases = {"sqlite": True, "postgres": reachable(5432), "mariadb": reachable(3306)}
    venvs = {"primary": ROOT / ".venv", "lts": ROOT / ".venv-52"}
    problems = []
    for name, ok in databases.items():
        if not ok:
            problems.append(f"{name}: server not reachable on 127.0.0.1 — its tests are skipped")
    for name, path in venvs.items():
        if not (path / "bin" / "python").exists():
            problems.append(f"{name}: {path.name} missing — its runs are skipped")
    for line in problems:
        print(f"test-matrix: {line}", flush=True)
    if CI and problems:
        print("test-matrix: CI=true needs SQLite, PostgreSQL, MariaDB and both virtualenvs.")
        return 2

    reports = ROOT / ".test-reports"
    shutil.rmtree(reports, ignore_errors=True)
    reports.mkdir()
    totals = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    failed_runs = []
    for venv_name, venv in venvs.items():
        if not (venv / "bin" / "python").exists():
            continue
        for db, ok in databases.items():
            if not ok:
                continue
            label = f"{venv_name}/{db}"
            report = reports / f"{venv_name}-{db}.xml"
            args = [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:randomly",
                    f"--junitxml={report}", *extra]
            if venv_name == "lts":
                args += ["-m", "not slow and not browser"]
            env = {**os.environ, "KATHIKON_DB": db, "KATHIKON_DB_SUFFIX": f"_{venv_name}"}
            started = time.monotonic()
            print(f"test-matrix: {label} ...", flush=True)
            code = subprocess.call(args, cwd=ROOT, env=env)
            counts = parse(report)
            for key in totals:
                totals[key] += counts[key]
            print(f"test-matrix: {label}: {counts['passed']} passed, {counts['failed']} failed, "
                  f"{counts['errors']} errors, {counts['skipped']} skipped "
                  f"in {time.monotonic() - started:.0f}s (exit {code})", flush=True)
            if code not in (0,) or counts["failed"] or counts["errors"]:
                failed_runs.append(label)
    failed = totals["failed"] + totals["errors"]
    print(f"{totals['passed']} passed, {failed} failed, {totals['skipped']} skipped")
    if failed_runs:
        print(f"test-matrix: failing runs: {', '.join(failed_runs)}")
        return 1
    return 0 if totals["passed"] else 1


def parse(report: Path) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    if not report.exists():
        counts["errors"] = 1
        return counts
    root = ET.parse(report).getroot()
    suites = root.iter("testsuite")
    for suite in suites:
        tests = int(suite.get("tests", 0))
        failures = int(suite.get("failures", 0))
        errors = int(suite.get("errors", 0))
        skipped = int(suite.get("skipped", 0))
        counts["failed"] += failures
        counts["errors"] += errors
        counts["skipped"] += skipped
        counts["passed"] += tests - failures - errors - skipped
    return counts


if __name__ == "__main__":
    sys.exit(main(sys.argv))
