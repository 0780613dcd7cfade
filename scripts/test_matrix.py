#!/usr/bin/env python3
"""Run the whole suite on every database this machine can reach, on both Django lines.

    primary   .venv     (Python 3.13, Django 6.x): every test, on SQLite, PostgreSQL, MariaDB
    lts       .venv-52  (Python 3.11, Django 5.2): every test but the whole-process and
                        browser ones (those exercise the OS and Chromium, not Django)

The lts line runs beside the primary one (it is light: no whole-process or browser
tests), so the whole matrix takes about as long as the primary line alone.
With CI=true every database and both virtualenvs must be there, or the run fails.
Prints one line per run and a closing 'N passed, N failed, N skipped' line.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
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
    failed_runs: list[str] = []
    runs = {name: [(db, venv) for db, ok in databases.items() if ok]
            for name, venv in venvs.items() if (venv / "bin" / "python").exists()}
    # The lts line (no whole-process or browser tests: light on the machine) runs beside
    # the primary one, its output kept in a log and printed when it is done.
    background = None
    if "lts" in runs and "primary" in runs:
        lts_line = runs.pop("lts")
        lts_results: list[tuple[str, int, float, Path]] = []
        print("test-matrix: lts runs beside the primary line (its output follows at the end)",
              flush=True)
        background = threading.Thread(
            target=lambda: lts_results.extend(run_line("lts", lts_line, reports, extra,
                                                       quiet=True)), daemon=True)
        background.start()
    for venv_name, line in list(runs.items()):
        collect(run_line(venv_name, line, reports, extra), totals, failed_runs)
    if background is not None:
        background.join()
        for label, _code, _seconds, log in lts_results:
            print(f"test-matrix: {label} (ran beside the primary line), its output:", flush=True)
            print(log.read_text(errors="replace"), end="", flush=True)
        collect(lts_results, totals, failed_runs)
    failed = totals["failed"] + totals["errors"]
    print(f"{totals['passed']} passed, {failed} failed, {totals['skipped']} skipped")
    if failed_runs:
        print(f"test-matrix: failing runs: {', '.join(failed_runs)}")
        return 1
    return 0 if totals["passed"] else 1


def run_line(venv_name: str, line: list[tuple[str, Path]], reports: Path, extra: list[str],
             quiet: bool = False) -> list[tuple[str, int, float, Path]]:
    """Run pytest for each database of one virtualenv in turn; (label, exit, seconds, log)."""
    results = []
    for db, venv in line:
        label = f"{venv_name}/{db}"
        report = reports / f"{venv_name}-{db}.xml"
        log = reports / f"{venv_name}-{db}.log"
        args = [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:randomly",
                f"--junitxml={report}", *extra]
        if venv_name == "lts":
            args += ["-m", "not slow and not browser"]
        env = {**os.environ, "KATHIKON_DB": db, "KATHIKON_DB_SUFFIX": f"_{venv_name}"}
        started = time.monotonic()
        if not quiet:
            print(f"test-matrix: {label} ...", flush=True)
        if quiet:
            with log.open("w") as out:
                code = subprocess.call(args, cwd=ROOT, env=env, stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        else:
            log.write_text("")
            code = subprocess.call(args, cwd=ROOT, env=env)
        results.append((label, code, time.monotonic() - started, log))
    return results


def collect(results: list[tuple[str, int, float, Path]], totals: dict[str, int],
            failed_runs: list[str]) -> None:
    """Add each run's counts from its JUnit report and print its one-line summary."""
    for label, code, seconds, _log in results:
        counts = parse(label_report(label))
        for key in totals:
            totals[key] += counts[key]
        print(f"test-matrix: {label}: {counts['passed']} passed, {counts['failed']} failed, "
              f"{counts['errors']} errors, {counts['skipped']} skipped "
              f"in {seconds:.0f}s (exit {code})", flush=True)
        if code != 0 or counts["failed"] or counts["errors"]:
            failed_runs.append(label)


def label_report(label: str) -> Path:
    venv_name, db = label.split("/")
    return ROOT / ".test-reports" / f"{venv_name}-{db}.xml"


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
