"""All phases for ONE database, in its own process (Django is set up once per process).

    python -m benchmarks.runner --db postgres --json out.json [--quick] [--only …]

The driver (``benchmarks.cli``) starts one of these per database and reads the
JSON; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import dbs
from benchmarks.drains import drain, fill
from benchmarks.partition_drain import phase_partitioned
from benchmarks.pgbouncer_drain import phase_pgbouncer
from benchmarks.procs import Workers, tree_rss_kib
from benchmarks.tracing_drain import phase_tracing
from benchmarks.workflow_drain import phase_workflow

PHASES = ("enqueue", "bulk", "storage", "drain", "latency", "backlog", "flow", "workflow",
          "tracing", "pgbouncer", "partitioned")

# Sizes per (database, mode). PostgreSQL gets the full figures; MariaDB and SQLite a
# reduced set (smaller N), labelled as such in the report.
SIZES: dict[tuple[str, str], dict[str, Any]] = {
    ("postgres", "full"): dict(single=5000, single_reps=3, bulk=20000, bulk_reps=3,
                               storage=20000, drain=20000, latency=100, backlog_small=10000,
                               backlog_large=1_000_000, backlog_window=200_000,
                               drain_timeout=120, fill_call=50_000, workflow=10_000,
                               workflow_rounds=2, workflow_processes=2,
                               partition_drain=10_000, partition_history=20_000_000,
                               partition_days=10, partition_rounds=2, churn_seconds=300),
    ("other", "full"): dict(single=2000, single_reps=3, bulk=10000, bulk_reps=3,
                            storage=10000, drain=10000, latency=50, backlog_small=10000,
                            backlog_large=100_000, backlog_window=20_000,
                            drain_timeout=90, fill_call=20_000, workflow=10_000,
                            workflow_rounds=2, workflow_processes=2,
                            partition_drain=0, partition_history=0, partition_days=0,
                            partition_rounds=0, churn_seconds=0),
    ("postgres", "quick"): dict(single=500, single_reps=1, bulk=5000, bulk_reps=1,
                                storage=2000, drain=3000, latency=20, backlog_small=2000,
                                backlog_large=20_000, backlog_window=5000,
                                drain_timeout=30, fill_call=20_000, workflow=3000,
                                workflow_rounds=1, workflow_processes=2,
                                partition_drain=2000, partition_history=200_000,
                                partition_days=2, partition_rounds=1, churn_seconds=15),
    ("other", "quick"): dict(single=300, single_reps=1, bulk=2000, bulk_reps=1,
                             storage=1000, drain=1000, latency=10, backlog_small=1000,
                             backlog_large=5000, backlog_window=1000,
                             drain_timeout=30, fill_call=5000, workflow=1000,
                             workflow_rounds=1, workflow_processes=2,
                             partition_drain=0, partition_history=0, partition_days=0,
                             partition_rounds=0, churn_seconds=0),
}
LATENCY_SPACING = 0.05  # seconds between latency jobs, like the peer harness


class Progress:
    """One status line per phase on stderr (rewritten in place on a terminal)."""

    def __init__(self, vendor: str):
        self.prefix = f"[{vendor}]"
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, text: str, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and not self.tty and now - self.last < 5:
            return
        self.last = now
        line = f"{self.prefix} {text}"
        if self.tty:
            sys.stderr.write("\r\033[K" + line + ("\n" if final else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def setup_django(vendor: str) -> None:
    os.environ["BENCH_DB"] = vendor
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


# --- phases ---------------------------------------------------------------------------

def phase_enqueue(size: dict[str, Any], progress: Progress, **_: Any) -> dict[str, Any]:
    """``kathikon.insert`` one job per call, autocommit (one transaction per job)."""
    import kathikon
    from benchmarks.workers import NoopWorker

    n, rates = size["single"], []
    for rep in range(size["single_reps"]):
        dbs.reset()
        started = time.perf_counter()
        for i in range(n):
            kathikon.insert(NoopWorker, {"i": i})
            if i % 500 == 0:
                progress(f"insert rep {rep + 1}: {i:,}/{n:,}")
        rates.append(n / (time.perf_counter() - started))
    dbs.reset()
    progress(f"insert: {statistics.median(rates):,.0f} jobs/s", final=True)
    return {"n": n, "reps": len(rates), "rates": rates, "rate": statistics.median(rates)}


def phase_bulk(size: dict[str, Any], progress: Progress, **_: Any) -> dict[str, Any]:
    """``kathikon.insert_many`` of ``n`` jobs in one call (default chunk size)."""
    import kathikon
    from benchmarks.workers import NoopWorker

    n, rates = size["bulk"], []
    for rep in range(size["bulk_reps"]):
        dbs.reset()
        progress(f"insert_many rep {rep + 1}")
        started = time.perf_counter()
        kathikon.insert_many([(NoopWorker, {"i": i}) for i in range(n)])
        rates.append(n / (time.perf_counter() - started))
    dbs.reset()
    progress(f"insert_many: {statistics.median(rates):,.0f} jobs/s", final=True)
    return {"n": n, "reps": len(rates), "rates": rates, "rate": statistics.median(rates)}


def phase_storage(size: dict[str, Any], progress: Progress, **_: Any) -> dict[str, Any]:
    """The storage hot path alone, in this process: claim 10 → run → one fenced ack."""
    from kathikon.executor import run_job, settle
    from kathikon.storage import claim_jobs

    n = size["storage"]
    dbs.reset()
    fill(n, size["fill_call"])
    dbs.settle_table()
    started = time.perf_counter()
    done = 0
    while True:
        jobs = claim_jobs("default", 10, "bench:storage")
        if not jobs:
            break
        settle([run_job(job) for job in jobs])
        done += len(jobs)
        if done % 1000 < 10:
            progress(f"storage loop {done:,}/{n:,}")
    elapsed = time.perf_counter() - started
    dbs.reset()
    progress(f"storage loop (claim 10 + run + ack, 1 process, no runtime): "
             f"{done / elapsed:,.0f} jobs/s", final=True)
    return {"n": done, "rate": done / elapsed, "batch": 10}


def phase_drain(size: dict[str, Any], progress: Progress, log_dir: Path,
                **_: Any) -> dict[str, Any]:
    """Pre-enqueued no-op jobs drained by 1 and by 2 ``kathikon_worker`` processes."""
    out = {}
    for procs in (1, 2):
        out[f"p{procs}"] = drain(size["drain"], procs, size, progress, log_dir,
                                  f"drain {procs} proc")
    dbs.reset()
    return out


def phase_flow(size: dict[str, Any], progress: Progress, log_dir: Path,
               **_: Any) -> dict[str, Any]:
    """What flow control costs, each against its plain twin in the same run, interleaved.

    ``insert`` of unique jobs (distinct args: every insert takes a new key) vs plain
    jobs in short alternating batches (A B B A …: load drifts on a shared machine); then
    1-process drains of the default queue with a ``global_limit`` it never reaches (the
    limited claim) and without one, alternating (A B B A).
    """
    import kathikon
    from benchmarks.workers import NoopWorker

    batch = max(50, size["single"] // 10)
    rounds = 2 * max(5, size["single_reps"] * 5)
    seconds: dict[str, list[float]] = {"plain": [], "unique": []}
    for turn in range(rounds):
        order = ("plain", "unique") if turn % 2 == 0 else ("unique", "plain")
        for kind in order:
            dbs.reset()
            unique = True if kind == "unique" else None
            started = time.perf_counter()
            for i in range(batch):
                kathikon.insert(NoopWorker, {"i": i}, unique=unique)
            seconds[kind].append(time.perf_counter() - started)
        progress(f"flow: insert batches {turn + 1}/{rounds}")
    plain = batch / statistics.median(seconds["plain"])
    unique = batch / statistics.median(seconds["unique"])
    progress(f"flow: unique insert {unique:,.0f} jobs/s vs plain {plain:,.0f} "
             f"(cost {plain / unique:.2f}x, {rounds} interleaved batches of {batch})", final=True)
    drains: dict[str, list[dict[str, Any]]] = {"unlimited": [], "global_limit": []}
    for kind in ("unlimited", "global_limit", "global_limit", "unlimited"):
        dbs.reset()
        fill(size["drain"], size["fill_call"])
        dbs.settle_table()
        kathikon.set_queue_limits("default", reset=True,
                                  **({"global_limit": 1_000_000} if kind != "unlimited" else {}))
        drains[kind].append(drain(size["drain"], 1, size, progress, log_dir,
                                   f"flow: drain, {kind.replace('_', ' ')}", prefilled=True))
    kathikon.set_queue_limits("default", reset=True)
    dbs.reset()
    unlimited = statistics.mean(d["rate"] for d in drains["unlimited"])
    limited = statistics.mean(d["rate"] for d in drains["global_limit"])
    ratio = limited / unlimited
    progress(f"flow: drain with an unreached global_limit at {ratio:.0%} of unlimited",
             final=True)
    return {"insert_plain": plain, "insert_unique": unique, "insert_seconds": seconds,
            "insert_batch": batch, "unique_cost": plain / unique,
            "drain_unlimited": {"rate": unlimited, "runs": drains["unlimited"]},
            "drain_global_limit": {"rate": limited, "runs": drains["global_limit"]},
            "limited_ratio": ratio}


def phase_latency(size: dict[str, Any], progress: Progress, log_dir: Path,
                  **_: Any) -> dict[str, Any]:
    """Pickup latency with an idle worker: jobs 50 ms apart record their start time."""
    import kathikon
    from benchmarks.workers import LatencyWorker

    dbs.reset()
    n = size["latency"]
    lat_file = log_dir / "latency.txt"
    lat_file.write_text("")

    def lines() -> list[str]:
        return [line for line in lat_file.read_text().splitlines() if line.strip()]

    with Workers(1, log_dir, env={"BENCH_LAT_FILE": str(lat_file)}) as workers:
        kathikon.insert(LatencyWorker, {"seq": -1, "t": time.time()})  # the sentinel
        deadline = time.monotonic() + 60
        while not lines():
            workers.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError("the latency sentinel job never ran")
            time.sleep(0.05)
        time.sleep(1.5)  # the worker is idle now
        next_at = time.monotonic()
        for seq in range(n):
            kathikon.insert(LatencyWorker, {"seq": seq, "t": time.time()})
            progress(f"latency: {seq + 1}/{n} enqueued")
            next_at += LATENCY_SPACING
            time.sleep(max(0.0, next_at - time.monotonic()))
        deadline = time.monotonic() + 30
        while len(lines()) < n + 1 and time.monotonic() < deadline:
            time.sleep(0.1)
    values = sorted(float(line.split()[1]) * 1000 for line in lines()
                    if not line.startswith("-1 "))
    dbs.reset()
    if not values:
        raise RuntimeError("no latency samples")
    result = {"n": n, "received": len(values), "p50": _pct(values, 50),
              "p95": _pct(values, 95), "max": values[-1], "mean": statistics.mean(values)}
    progress(f"pickup latency p50 {result['p50']:.1f} ms, p95 {result['p95']:.1f} ms, "
             f"max {result['max']:.1f} ms ({len(values)}/{n})", final=True)
    return result


def _pct(values: list[float], pct: float) -> float:
    """Percentile of sorted ``values`` with linear interpolation (as the peer harness does)."""
    k = (len(values) - 1) * pct / 100
    lo = int(k)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def phase_backlog(size: dict[str, Any], progress: Progress, log_dir: Path,
                  **_: Any) -> dict[str, Any]:
    """Drain rate with a small vs a large backlog (1 process), the claim plan, worker RSS."""
    small, large, window = size["backlog_small"], size["backlog_large"], size["backlog_window"]
    out: dict[str, Any] = {"small": drain(small, 1, size, progress, log_dir,
                                           f"backlog {small:,}")}
    dbs.reset()
    fill_seconds = fill(large, size["fill_call"], progress)
    progress(f"filled {large:,} jobs with insert_many in {fill_seconds:.1f} s "
             f"({large / fill_seconds:,.0f} jobs/s)", final=True)
    out["fill"] = {"n": large, "seconds": fill_seconds, "rate": large / fill_seconds}
    dbs.settle_table()
    out["explain"] = explain_claim()
    progress(f"claim plan walks kathikon_job_claim in order: "
             f"{out['explain']['uses_claim_index']}", final=True)
    out["large"] = _drain_window(large, window, size, progress, log_dir)
    dbs.reset()
    return out


def _drain_window(n: int, window: int, size: dict[str, Any], progress: Progress,
                  log_dir: Path) -> dict[str, Any]:
    """Drain the first ``window`` jobs of an ``n`` backlog with 1 worker, sampling its RSS."""
    samples: list[tuple[int, int]] = []  # (jobs completed, RSS KiB)
    started = time.monotonic()
    done = 0
    timeout = max(size["drain_timeout"], 600)
    with Workers(1, log_dir) as workers:
        pid = workers.pids[0]
        last_count = 0.0
        while done < window and time.monotonic() - started < timeout:
            time.sleep(0.25)
            workers.check_alive()
            if time.monotonic() - last_count >= 1.0:
                done = dbs.count_completed()
                last_count = time.monotonic()
                samples.append((done, tree_rss_kib(pid)))
                progress(f"backlog {n:,}: {done:,}/{window:,} drained, "
                         f"worker RSS {samples[-1][1] / 1024:.1f} MiB")
        samples.append((dbs.count_completed(), tree_rss_kib(pid)))
        wall = time.monotonic() - started
    count, span = dbs.completion_stats()
    rate = (count - 1) / span if span > 0 else 0.0
    # RSS growth: from the first sample after 10% of the window (warm: imports,
    # connection, caches) to the last sample.
    warm = next((rss for jobs, rss in samples if jobs >= window * 0.1 and rss), 0)
    final = next((rss for _, rss in reversed(samples) if rss), 0)
    peak = max((rss for _, rss in samples), default=0)
    growth = (final - warm) / warm if warm else None
    progress(f"backlog {n:,}: {rate:,.0f} jobs/s over {count:,} jobs; RSS "
             f"{warm / 1024:.1f} -> {final / 1024:.1f} MiB"
             f"{'' if growth is None else f' ({growth:+.1%})'}", final=True)
    return {"n": n, "window": window, "completed": count, "rate": rate, "wall": wall,
            "rss_warm_kib": warm, "rss_final_kib": final, "rss_peak_kib": peak,
            "rss_growth": growth, "rss_samples": samples}


def explain_claim() -> dict[str, Any]:
    """The claim query's plan on the current table (PostgreSQL: EXPLAIN ANALYZE, rolled back)."""
    from django.db import connection, transaction

    from kathikon.states import CLAIMABLE_STATES

    vendor = dbs.vendor_of_connection()
    if vendor == "postgres":
        from kathikon.storage.claims import _PG_CLAIM
        from kathikon.storage.uniques import key_after_sql

        sql = _PG_CLAIM.format(now="statement_timestamp()", key=key_after_sql("running", "j"))
        params = {"queue": "default", "limit": 10, "node": "bench:explain",
                  "into": "running", "now": None}
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            transaction.set_rollback(True)
    elif vendor == "mariadb":
        from django.utils import timezone

        from kathikon.storage.claims import _MYSQL_CLAIM

        stamp = connection.ops.adapt_datetimefield_value(timezone.now())
        params: list[Any] = []
        for state in CLAIMABLE_STATES:
            params += ["default", state, stamp, 10]
        rows = dbs.execute("EXPLAIN " + _MYSQL_CLAIM, [*params, 10])
        plan = "\n".join(" | ".join(str(v) for v in row) for row in rows)
    else:
        from django.utils import timezone

        from kathikon.storage.claims import _SQLITE_CLAIMS

        stamp = connection.ops.adapt_datetimefield_value(timezone.now())
        rows = dbs.execute("EXPLAIN QUERY PLAN " + _SQLITE_CLAIMS["running"],
                           ["running", stamp, "bench:explain", "default", stamp, "default", 10])
        plan = "\n".join(str(row[-1]) for row in rows)
    time_ms = None
    for line in plan.splitlines():
        if line.strip().startswith("Execution Time:"):
            time_ms = float(line.split(":")[1].split()[0])
    # A sort step means the claim reads every claimable row instead of the first few.
    # (MariaDB: the union's final sort of at most 2 x limit rows does not count.)
    scans = [line for line in plan.splitlines() if "UNION RESULT" not in line.upper()]
    sorts = any(marker in line for line in scans for marker in (
        "TEMP B-TREE FOR ORDER BY", "filesort", "Sort Key", "Sort Method"))
    return {"plan": plan, "uses_claim_index": "kathikon_job_claim" in plan and not sorts,
            "sorts": sorts, "execution_ms": time_ms}


RUNNERS: dict[str, Callable[..., dict[str, Any]]] = {
    "enqueue": phase_enqueue, "bulk": phase_bulk, "storage": phase_storage,
    "drain": phase_drain, "latency": phase_latency, "backlog": phase_backlog,
    "flow": phase_flow, "workflow": phase_workflow, "tracing": phase_tracing,
    "pgbouncer": phase_pgbouncer, "partitioned": phase_partitioned,
}


def run(vendor: str, phases: list[str], quick: bool, out_path: Path | None,
        log_dir: Path, overrides: dict[str, int] | None = None) -> dict[str, Any]:
    import django

    progress = Progress(vendor)
    mode = "quick" if quick else "full"
    size = {**SIZES[("postgres" if vendor == "postgres" else "other", mode)], **(overrides or {})}
    results: dict[str, Any] = {"vendor": vendor, "mode": mode, "sizes": size, "phases": {},
                               "errors": {}}

    def save() -> None:
        if out_path:
            out_path.write_text(json.dumps(results, indent=1, default=str))

    progress(f"creating database {dbs.db_name()} and migrating", final=True)
    dbs.create(vendor)
    try:
        setup_django(vendor)
        results["server"] = dbs.server_info()
        results["django"] = django.get_version()
        save()
        for name in phases:
            started = time.monotonic()
            try:
                results["phases"][name] = RUNNERS[name](size=size, progress=progress,
                                                        log_dir=log_dir)
            except Exception as exc:  # one broken phase must not lose the others
                import traceback

                progress(f"{name} FAILED: {exc}", final=True)
                results["errors"][name] = "".join(traceback.format_exception(exc))[-3000:]
                with contextlib.suppress(Exception):
                    dbs.reset()
            results["phases"].get(name, {})["seconds"] = time.monotonic() - started
            save()
    finally:
        from django.db import connections

        connections.close_all()
        dbs.drop(vendor)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.runner")
    parser.add_argument("--db", required=True, choices=dbs.VENDORS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=",".join(PHASES))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--log-dir", type=Path)
    parser.add_argument("--size", action="append", default=[], metavar="KEY=N",
                        help="override one size, e.g. --size single=50 (see SIZES)")
    args = parser.parse_args(argv)
    phases = [p for p in args.only.split(",") if p]
    unknown = set(phases) - set(PHASES)
    if unknown:
        parser.error(f"unknown phase(s) {sorted(unknown)}; choose from {', '.join(PHASES)}")
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix=f"kathikon-bench-{args.db}-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    overrides = {}
    for item in args.size:
        key, _, value = item.partition("=")
        if key not in SIZES[("postgres", "full")] or not value.isdigit():
            parser.error(f"--size {item!r}: expected KEY=N with KEY one of "
                         f"{', '.join(SIZES[('postgres', 'full')])}")
        overrides[key] = int(value)
    results = run(args.db, phases, args.quick, args.json, log_dir, overrides)
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
