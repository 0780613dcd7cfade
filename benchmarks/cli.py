"""``python -m benchmarks``: run the phases on each database, print a summary, write the docs.

    python -m benchmarks                      # full run (~10 min), writes docs/benchmarks.md
    python -m benchmarks --quick              # ~1 min smoke run (small N), prints only
    python -m benchmarks --db postgres --only enqueue,drain
    python -m benchmarks --only admin         # the admin page timings (1M jobs)
    python -m benchmarks --only peers         # side by side with pgqueuer, oban-py, chancy, ...
    python -m benchmarks --only mariadb-peer  # side by side with django-tasks-db on MariaDB

Each database runs in its own ``benchmarks.runner`` process (Django is set up
once per process); the database ``kathikon_bench`` is created and dropped.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import dbs, report
from benchmarks.procs import ROOT, worker_env
from benchmarks.runner import PHASES

ALL_PHASES = (*PHASES, "admin", "peers", "mariadb-peer")
DEFAULT_PHASES = ("enqueue", "bulk", "storage", "drain", "latency", "backlog", "workflow",
                  "tracing", "pgbouncer", "admin", "peers", "mariadb-peer")


def admin_available() -> bool:
    return (ROOT / "benchmarks" / "admin_pages.py").exists()


def run_vendor(vendor: str, phases: list[str], quick: bool, work: Path) -> dict[str, Any]:
    out = work / f"{vendor}.json"
    log_dir = work / f"logs-{vendor}"
    log_dir.mkdir()
    command = [sys.executable, "-m", "benchmarks.runner", "--db", vendor, "--json", str(out),
               "--only", ",".join(phases), "--log-dir", str(log_dir)]
    if quick:
        command.append("--quick")
    code = subprocess.call(command, cwd=ROOT, env=worker_env())
    results = json.loads(out.read_text()) if out.exists() else {"vendor": vendor, "phases": {}}
    if code != 0:
        results.setdefault("errors", {})["runner"] = f"runner exited with {code}"
    results["log_dir"] = str(log_dir)
    return results


def run_admin(quick: bool) -> dict[str, Any]:
    """OPERATIONS' admin page timings (``benchmarks.admin_pages.main``), output captured."""
    argv = ["--drop", *(["--quick"] if quick else [])]  # make bench leaves no database behind
    code = ("import sys\nfrom benchmarks.admin_pages import main\n"
            "result = main(sys.argv[1:])\nsys.exit(result if isinstance(result, int) else 0)")
    sys.stderr.write("[admin] admin page timings (benchmarks/admin_pages.py)\n")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, env=worker_env(),
                          stdout=subprocess.PIPE, text=True)
    sys.stdout.write(proc.stdout)
    return {"returncode": proc.returncode, "output": proc.stdout,
            "seconds": time.monotonic() - started}


def run_peers(quick: bool) -> dict[str, Any]:
    """The shared peer harness (``benchmarks.peers``): Kathikon next to the fastest peers."""
    from benchmarks import peers

    if peers.harness_source() is None:
        why = (f"peer harness not found at {peers.DEFAULT_HARNESS} (set KATHIKON_PEER_HARNESS)")
        sys.stderr.write(f"[peers] skipped: {why}\n")
        return {"skipped": why}
    sys.stderr.write("[peers] the shared harness: " + ", ".join(peers.DEFAULT_PEERS) + "\n")
    started = time.monotonic()
    try:
        run_dir, version = peers.run(peers.DEFAULT_PEERS, quick=quick)
    except (OSError, subprocess.CalledProcessError) as exc:
        sys.stderr.write(f"[peers] failed: {exc}\n")
        return {"error": str(exc), "seconds": time.monotonic() - started}
    text = peers.render(run_dir, version)
    if not quick:
        (ROOT / "benchmarks" / "peers.md").write_text(text)
    sys.stdout.write(text)
    return {"run_dir": str(run_dir), "version": version, "text": text,
            "seconds": time.monotonic() - started}


def run_mariadb_peer(quick: bool) -> dict[str, Any]:
    """django-tasks-db next to Kathikon on MariaDB (``benchmarks.mariadb_peer``)."""
    from benchmarks import mariadb_peer, peers

    why = dbs.reachable("mariadb") or (None if peers.harness_source() else
                                       f"peer harness not found at {peers.DEFAULT_HARNESS}")
    if why:
        sys.stderr.write(f"[mariadb-peer] skipped: {why}\n")
        return {"skipped": why}
    started = time.monotonic()
    try:
        result = mariadb_peer.run(2000 if quick else 10_000)
    except (OSError, subprocess.CalledProcessError) as exc:
        sys.stderr.write(f"[mariadb-peer] failed: {exc}\n")
        return {"error": str(exc), "seconds": time.monotonic() - started}
    text = mariadb_peer.render(result)
    if not quick:
        (ROOT / "benchmarks" / "mariadb_peers.md").write_text(text)
    sys.stdout.write(text)
    return {**result, "text": text, "seconds": time.monotonic() - started}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small N, ~1 minute")
    parser.add_argument("--db", default=",".join(dbs.VENDORS),
                        help="comma-separated: postgres,mariadb,sqlite (default: all three)")
    parser.add_argument("--only", default=None,
                        help=f"comma-separated phases: {', '.join(ALL_PHASES)}")
    parser.add_argument("--docs", type=Path, default=None,
                        help="write the report here (default: docs/benchmarks.md on a full "
                             "run of every phase; nowhere on --quick or --only runs)")
    parser.add_argument("--no-docs", action="store_true", help="never write the report")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw results")
    parser.add_argument("--note", default=None, help="a remark printed above the table")
    args = parser.parse_args(argv)

    vendors = [v for v in args.db.split(",") if v]
    bad = set(vendors) - set(dbs.VENDORS)
    if bad:
        parser.error(f"unknown database(s) {sorted(bad)}; choose from {', '.join(dbs.VENDORS)}")
    phases = list(DEFAULT_PHASES) if args.only is None else [p for p in args.only.split(",") if p]
    bad = set(phases) - set(ALL_PHASES)
    if bad:
        parser.error(f"unknown phase(s) {sorted(bad)}; choose from {', '.join(ALL_PHASES)}")

    started = time.monotonic()
    when = dt.datetime.now(dt.timezone.utc)
    machine = report.machine()
    sys.stderr.write(f"Kathikon benchmarks ({'quick' if args.quick else 'full'}) on "
                     f"{machine['summary']}\n")
    results: dict[str, Any] = {"started": when.isoformat(), "quick": args.quick,
                               "note": args.note,
                               "machine": machine, "phases": phases, "vendors": {},
                               "skipped": {}}
    db_phases = [p for p in phases if p in PHASES]
    with tempfile.TemporaryDirectory(prefix="kathikon-bench-") as tmp:
        work = Path(tmp)
        for vendor in vendors if db_phases else []:
            why = dbs.reachable(vendor)
            if why:
                sys.stderr.write(f"[{vendor}] skipped: server not reachable ({why})\n")
                results["skipped"][vendor] = why
                continue
            results["vendors"][vendor] = run_vendor(vendor, db_phases, args.quick, work)
            errors = results["vendors"][vendor].get("errors")
            if errors:
                for name, text in errors.items():
                    sys.stderr.write(f"[{vendor}] {name} failed:\n{text}\n"
                                     f"(worker logs: {results['vendors'][vendor]['log_dir']})\n")
        if "admin" in phases:
            if admin_available():
                results["admin"] = run_admin(args.quick)
            else:
                sys.stderr.write("[admin] skipped: benchmarks/admin_pages.py is not there\n")
        if "peers" in phases:
            results["peers"] = run_peers(args.quick)
        if "mariadb-peer" in phases:
            results["mariadb_peer"] = run_mariadb_peer(args.quick)
    results["seconds"] = time.monotonic() - started

    text = report.summary(results)
    print()
    print(text)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    full_run = not args.quick and args.only is None and set(vendors) == set(dbs.VENDORS)
    target = args.docs or (ROOT / "docs" / "benchmarks.md" if full_run else None)
    if target and not args.no_docs:
        target.write_text(report.document(results))
        sys.stderr.write(f"wrote {target}\n")
    sys.stderr.write(f"done in {results['seconds'] / 60:.1f} min\n")
    failed = any(v.get("errors") for v in results["vendors"].values())
    failed = failed or results.get("admin", {}).get("returncode", 0) != 0
    failed = failed or "error" in results.get("peers", {})
    failed = failed or "error" in results.get("mariadb_peer", {})
    return 1 if failed else 0
