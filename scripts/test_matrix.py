#!/usr/bin/env python3
"""Run the whole suite on every database this machine can reach, on both Django lines.

    primary   .venv     (Python 3.13, Django 6.x): every test, on SQLite, PostgreSQL, MariaDB
    lts       .venv-52  (Python 3.11, Django 5.2): every test but the whole-process and
                        browser ones (those exercise the OS and Chromium, not Django)
    primary/pgbouncer   the runtime suite's whole-process tests again, each worker
                        reaching PostgreSQL through the tests' own PgBouncer in
                        transaction mode (tests/pgbouncer.py), listening directly

lts/postgres and primary/pgbouncer run on a partitioned job table
(``KATHIKON_PARTITIONED=1``, docs/partitioning.md): between them every test, the
whole-process ones (kill -9, the lifeline, fencing) included, also passes with
partitioning on; primary/postgres keeps the plain table.

The runs go side by side in four lanes of about equal length (most of their time is
spent waiting on worker processes, not computing): primary/postgres but tests/ops;
primary/sqlite then lts/sqlite; primary/mariadb then lts/mariadb; lts/postgres, then
primary/postgres-ops (PostgreSQL's tests/ops), then primary/pgbouncer.
Each run uses its own test database (suffix ``_<line>``, after ``KATHIKON_DB_SUFFIX``
if set), so they never collide. PostgreSQL's primary run prints its progress live;
every other run's output is kept in .test-reports/ and printed when all are done.
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
LIVE = ("primary", "postgres")  # the longest run: its progress is printed as it goes
#: runs on a partitioned job table (docs/partitioning.md): the plain one is primary/postgres's
PARTITIONED = {("lts", "postgres"), ("primary", "pgbouncer")}

Run = tuple[str, str, Path]  # (line, database, virtualenv)
Result = tuple[str, int, float, Path]  # (label, exit code, seconds, log)


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
    lanes = plan(databases, venvs)
    print(f"test-matrix: {sum(map(len, lanes))} runs in {len(lanes)} lanes side by side: "
          + "; ".join(" then ".join(f"{line}/{db}" for line, db, _ in lane) for lane in lanes),
          flush=True)
    results: list[list[Result]] = [[] for _ in lanes]
    threads = [threading.Thread(target=lambda i=i, lane=lane: results[i].extend(
                   run_lane(lane, reports, extra)), daemon=True)
               for i, lane in enumerate(lanes)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done = [result for lane in results for result in lane]
    for label, _code, _seconds, log in done:
        if log.stat().st_size:
            print(f"test-matrix: {label}, its output:", flush=True)
            print(log.read_text(errors="replace"), end="", flush=True)
    totals = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    failed_runs: list[str] = []
    collect(done, totals, failed_runs)
    failed = totals["failed"] + totals["errors"]
    print(f"{totals['passed']} passed, {failed} failed, {totals['skipped']} skipped "
          f"in {time.monotonic() - started:.0f}s")
    if failed_runs:
        print(f"test-matrix: failing runs: {', '.join(failed_runs)}")
        return 1
    return 0 if totals["passed"] else 1


def plan(databases: dict[str, bool], venvs: dict[str, Path]) -> list[list[Run]]:
    """Four lanes of about equal length: PostgreSQL's primary run alone (the longest);
    SQLite's and MariaDB's primary runs, each followed by its lts run; lts/postgres
    followed by primary/pgbouncer."""
    present = {name: venv for name, venv in venvs.items() if (venv / "bin" / "python").exists()}
    reached = [db for db, ok in databases.items() if ok]
    primary, lts = present.get("primary"), present.get("lts")
    lanes: list[list[Run]] = []
    for db in sorted(reached, key=lambda db: db != "postgres"):  # the longest starts at once
        lane: list[Run] = [("primary", db, primary)] if primary else []
        if lts and db != "postgres":
            lane.append(("lts", db, lts))
        lanes.append(lane)
    if "postgres" in reached:
        last: list[Run] = [("lts", "postgres", lts)] if lts else []
        if primary:  # PostgreSQL's operations tests here, to shorten its own lane
            last += [("primary", "postgres-ops", primary), ("primary", "pgbouncer", primary)]
        lanes.append(last)
    return [lane for lane in lanes if lane]


def run_lane(lane: list[Run], reports: Path, extra: list[str]) -> list[Result]:
    """Run pytest for each run of one lane in turn."""
    results = []
    for line, db, venv in lane:
        label = f"{line}/{db}"
        report = reports / f"{line}-{db}.xml"
        log = reports / f"{line}-{db}.log"
        args = [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:randomly",
                f"--junitxml={report}", *extra]
        if line == "lts":
            args += ["-m", "not slow and not browser"]
        suffix = os.environ.get("KATHIKON_DB_SUFFIX", "") + f"_{line}"
        env = {**os.environ, "KATHIKON_DB": db, "KATHIKON_DB_SUFFIX": suffix}
        if db == "postgres" and line == "primary" and not extra:
            args.append("--ignore=tests/ops")  # run in a lane of its own: postgres-ops
        if db == "postgres-ops":
            if not extra:
                args.append("tests/ops")
            env.update(KATHIKON_DB="postgres", KATHIKON_DB_SUFFIX=suffix + "_ops")
        if (line, db) in PARTITIONED:
            env["KATHIKON_PARTITIONED"] = "1"
        if db == "pgbouncer":
            args += ["-m", "slow"]
            if not any(arg.startswith("tests") for arg in extra):
                # several databases: about routing, not pooling (its second database is
                # reached directly anyway); run once, in primary/postgres
                args += ["tests/runtime", "--ignore=tests/runtime/test_databases.py"]
            env.update(KATHIKON_DB="postgres", KATHIKON_TEST_WORKERS_VIA="pgbouncer",
                       KATHIKON_DB_SUFFIX=suffix + "_pgbouncer")
        started = time.monotonic()
        if (line, db) == LIVE:
            print(f"test-matrix: {label} (live) ...", flush=True)
            log.write_text("")
            code = subprocess.call(args, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
        else:
            with log.open("w") as out:
                code = subprocess.call(args, cwd=ROOT, env=env, stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        seconds = time.monotonic() - started
        print(f"\ntest-matrix: {label} finished in {seconds:.0f}s (exit {code})", flush=True)
        results.append((label, code, seconds, log))
    return results


def collect(results: list[Result], totals: dict[str, int], failed_runs: list[str]) -> None:
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
    line, db = label.split("/")
    return ROOT / ".test-reports" / f"{line}-{db}.xml"


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
