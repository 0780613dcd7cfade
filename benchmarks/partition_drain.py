"""The partitioned job table against the plain one, in the same run (issue 23).

PostgreSQL only. In order:

1. claim latency and drain rate of ``partition_drain`` new jobs on the empty plain
   table, for reference;
2. ``kathikon_partition enable``; ``partition_history`` finished jobs loaded into the
   past ``partition_days`` days (``generate_series``, not run); then the same claims
   and drain with those days detached (an empty table) and attached, alternated
   empty, history, history, empty so that a machine's drifting load hits both alike;
3. the oldest day dropped by ``partitions.maintain`` (what every pruner does);
4. churn: a worker kept busy for ``churn_seconds`` on each layout, then each table's
   size and dead tuples (``pg_stat_user_tables``).

Claim latency: ``CLAIMS`` claims of ``CLAIM_SIZE`` jobs in this process (the
worker's own statement, prepared), median and 95th percentile; then as many again with
``synchronous_commit`` off, the claim's work without the disk's flush of its commit. The
ratios against the empty table are given as medians of medians and, paired, as the
median of each turn's own ratio.
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks import dbs
from benchmarks.drains import drain, fill, order

CLAIMS = 200
CLAIM_SIZE = 10
HISTORY_QUEUE = "history"
CHUNK = 500_000  # history rows per INSERT


def phase_partitioned(size: dict[str, Any], progress: Any, log_dir: Path,
                      **_: Any) -> dict[str, Any]:
    from django.db import connection

    from kathikon.storage import partitions

    if connection.vendor != "postgresql":
        return {"skipped": "partitioning is PostgreSQL's"}
    n = size["partition_drain"]
    out: dict[str, Any] = {"n": n, "history": size["partition_history"],
                           "days": size["partition_days"]}
    if partitions.is_partitioned():
        partitions.disable(keep_history=False)
    out["plain_empty"] = _measure(n, size, progress, log_dir, "plain, empty")
    dbs.reset()  # an empty table: no legacy partition (docs/partitioning.md)
    enabled = partitions.enable()
    out["enable_locked_s"] = enabled.locked_seconds
    out["load"] = _load_history(size["partition_history"], size["partition_days"], progress)
    history = [p for p in partitions.partitions()
               if p.kind == "day" and p.lower is not None and p.lower < dt.date.today()]
    runs: dict[str, list[dict[str, Any]]] = {"empty": [], "history": []}
    # the same history detached (empty) and attached again: E H H E, E H H E … per round
    for kind in order(2 * size["partition_rounds"], ("empty", "history")):
        _attach(history, attached=kind == "history")
        label = ("partitioned, empty" if kind == "empty" else
                 f"partitioned, {size['partition_history']:,} finished")
        runs[kind].append(_measure(n, size, progress, log_dir, label, keep_history=True))
    _attach(history, attached=True)
    for kind, done in runs.items():
        out[f"partitioned_{kind}"] = {
            key: statistics.median(run[key] for run in done)
            for key in ("rate", "claim_ms_median", "claim_ms_p95", "claim_work_ms_median")
        } | {"runs": done}
    out["prune"] = _drop_oldest_day(progress)
    out["churn_seconds"] = size["churn_seconds"]
    if size["churn_seconds"]:
        dbs.reset()  # both churns start from an empty table
        out["churn_partitioned"] = _churn(size, progress, log_dir, "partitioned")
    partitions.disable(keep_history=False)
    if size["churn_seconds"]:
        dbs.reset()
        out["churn_plain"] = _churn(size, progress, log_dir, "plain")
    empty, full = out["partitioned_empty"], out["partitioned_history"]
    out["drain_ratio"] = full["rate"] / empty["rate"] if empty["rate"] else None
    out["claim_ratio"] = (full["claim_ms_median"] / empty["claim_ms_median"]
                          if empty["claim_ms_median"] else None)
    # the same, as the median of each turn's own ratio: the runs of one turn ran back to
    # back, so a drift of the machine's load between turns cancels out
    for key, name in (("rate", "drain"), ("claim_ms_median", "claim"),
                      ("claim_work_ms_median", "claim_work")):
        out[f"{name}_paired_ratio"] = paired_ratio(full["runs"], empty["runs"], key)
    progress(f"partitioned: drain {full['rate']:,.0f} jobs/s beside "
             f"{size['partition_history']:,} finished jobs vs {empty['rate']:,.0f} empty "
             f"({out['drain_ratio']:.0%}, paired {out['drain_paired_ratio']:.0%}); claim "
             f"{full['claim_ms_median']:.2f} vs {empty['claim_ms_median']:.2f} ms (paired "
             f"{out['claim_paired_ratio']:.2f}x; without the commit's flush "
             f"{out['claim_work_paired_ratio']:.2f}x); a day of {out['prune']['rows']:,} jobs "
             f"dropped in {out['prune']['seconds']:.3f} s", final=True)
    return out


def paired_ratio(full: list[dict[str, Any]], empty: list[dict[str, Any]],
                 key: str) -> float | None:
    """Median over the turns of ``full[i][key] / empty[i][key]`` (run ``i`` of each kind
    ran in turn ``i``, back to back); ``None`` without a pair to compare."""
    ratios = [f[key] / e[key] for f, e in zip(full, empty, strict=False)
              if f.get(key) and e.get(key)]
    return statistics.median(ratios) if ratios else None


def _attach(history: list[Any], *, attached: bool) -> None:
    """Attach or detach the partitions holding the loaded history (each kept whole)."""
    from kathikon.storage import partitions

    names = {p.name for p in partitions.partitions()}
    for p in history:
        if attached and p.name not in names:
            dbs.execute(f"ALTER TABLE kathikon_job ATTACH PARTITION {p.name} FOR VALUES "
                        f"FROM ('{p.lower.isoformat()}') TO ('{p.upper.isoformat()}')")
        elif not attached and p.name in names:
            dbs.execute(f"ALTER TABLE kathikon_job DETACH PARTITION {p.name}")


def _measure(n: int, size: dict[str, Any], progress: Any, log_dir: Path, label: str, *,
             keep_history: bool = False) -> dict[str, Any]:
    """Claim latency on ``n`` waiting jobs, then their drain by one worker process."""
    if keep_history:
        dbs.execute(f"DELETE FROM kathikon_job WHERE queue <> '{HISTORY_QUEUE}'")
    else:
        dbs.reset()
    fill(n + 2 * CLAIMS * CLAIM_SIZE, size["fill_call"])
    dbs.settle_table()
    timings = _claims()
    # The claim's work alone: each claim commits, and waiting for the disk to flush that
    # commit is most of a claim's time here and most of its spread (0.66 to 1.28 ms medians
    # on one table), the same for any table; without it the history's cost, if any, shows.
    dbs.execute("SET synchronous_commit TO off")
    try:
        work = _claims()
    finally:
        dbs.execute("RESET synchronous_commit")
    dbs.execute("DELETE FROM kathikon_job WHERE attempted_by = 'bench-claims'")
    result = drain(n, 1, size, progress, log_dir, f"partitioned phase: {label}",
                   prefilled=True, queue="default")
    result.update(claim_ms_median=statistics.median(timings),
                  claim_ms_p95=timings[int(len(timings) * 0.95) - 1],
                  claim_work_ms_median=statistics.median(work))
    progress(f"{label}: claim of {CLAIM_SIZE} median {result['claim_ms_median']:.2f} ms, "
             f"p95 {result['claim_ms_p95']:.2f} ms; without the commit's flush "
             f"{result['claim_work_ms_median']:.2f} ms", final=True)
    return result


def _claims() -> list[float]:
    """``CLAIMS`` claims of ``CLAIM_SIZE`` jobs (the worker's own statement), in ms, sorted."""
    from kathikon import storage

    timings = []
    for _ in range(CLAIMS):
        started = time.perf_counter()
        claimed = storage.claim_jobs("default", CLAIM_SIZE, "bench-claims")
        timings.append((time.perf_counter() - started) * 1000)
        assert len(claimed) == CLAIM_SIZE
    return sorted(timings)


def _load_history(rows: int, days: int, progress: Any) -> dict[str, Any]:
    """``rows`` completed jobs spread over the ``days`` days before today."""
    from kathikon.storage import partitions

    today = dt.datetime.now(dt.timezone.utc).date()
    first = today - dt.timedelta(days=days)
    partitions.create_days(first, today - dt.timedelta(days=1))
    per_day = rows // days
    started = time.perf_counter()
    done = 0
    for offset in range(days):
        day = dt.datetime.combine(first + dt.timedelta(days=offset), dt.time.min,
                                  tzinfo=dt.timezone.utc)
        for start in range(0, per_day, CHUNK):
            count = min(CHUNK, per_day - start)
            dbs.execute(f"""
                INSERT INTO kathikon_job (id, queue, worker, args, state, priority,
                    max_attempts, attempts, available_at, inserted_at, started_at,
                    completed_at, errors, attempted_by, lease, meta, suspect, crashes)
                SELECT gen_random_uuid(), '{HISTORY_QUEUE}', 'benchmarks.workers.NoopWorker',
                       jsonb_build_object('i', g), 'completed', 0, 20, 1, t, t, t, t,
                       '[]'::jsonb, 'bench', 1, '{{}}'::jsonb, false, 0
                FROM (SELECT g, %s::timestamptz
                             + (g::bigint + %s) * %s::bigint * interval '1 microsecond'
                      AS t FROM generate_series(0, %s - 1) AS g) AS s""",
                        [day, start, 86_400_000_000 // per_day, count])
            done += count
            elapsed = time.perf_counter() - started
            progress(f"loading history {done:,}/{per_day * days:,} "
                     f"({done / elapsed:,.0f} rows/s)")
    seconds = time.perf_counter() - started
    dbs.execute("VACUUM ANALYZE kathikon_job")
    progress(f"history: {done:,} finished jobs in {days} day partitions, loaded in "
             f"{seconds:.0f} s", final=True)
    return {"rows": done, "seconds": seconds}


def _drop_oldest_day(progress: Any) -> dict[str, Any]:
    from kathikon.storage import partitions

    days = [p for p in partitions.partitions() if p.kind == "day"]
    counted = [(p, int(dbs.execute(f"SELECT count(*) FROM {p.name}")[0][0])) for p in days]
    oldest, rows = next((p, count) for p, count in counted if count)
    now = dt.datetime.now(dt.timezone.utc)
    upper = dt.datetime.combine(oldest.upper, dt.time.min, tzinfo=dt.timezone.utc)
    retention = now - upper  # exactly the oldest day has expired
    started = time.perf_counter()
    done = partitions.maintain(now=now, retention=retention)
    seconds = time.perf_counter() - started
    assert done.dropped == [oldest.name], done
    progress(f"prune: {oldest.name} ({rows:,} jobs) dropped in {seconds:.3f} s", final=True)
    return {"partition": oldest.name, "rows": rows, "seconds": seconds}


def _churn(size: dict[str, Any], progress: Any, log_dir: Path, label: str) -> dict[str, Any]:
    """One worker kept busy (never fewer than ``BACKLOG`` jobs waiting) for
    ``churn_seconds``; then the job tables' sizes and dead tuples."""
    import kathikon
    from benchmarks.procs import Workers
    from benchmarks.workers import NoopWorker

    backlog = 5000
    seconds = size["churn_seconds"]
    inserted = 0
    started = time.monotonic()
    with Workers(1, log_dir) as workers:
        while time.monotonic() - started < seconds:
            workers.check_alive()
            if dbs.count_pending() < backlog:
                kathikon.insert_many([(NoopWorker, {"i": i}) for i in range(backlog)],
                                     chunk_size=5000)
                inserted += backlog
            time.sleep(0.1)
            progress(f"churn ({label}): {time.monotonic() - started:,.0f}/{seconds} s, "
                     f"{inserted:,} jobs inserted")
    time.sleep(1.5)  # the statistics reach pg_stat_user_tables within a second
    tables = [
        {"table": name, "live_tuples": int(live), "dead_tuples": int(dead),
         "bytes": int(total)}
        for name, live, dead, total in dbs.execute(
            "SELECT relname, n_live_tup, n_dead_tup, pg_total_relation_size(relid) "
            "FROM pg_stat_user_tables WHERE relname LIKE 'kathikon_job%%' "
            "AND relname <> 'kathikon_jobevent' ORDER BY relname")]
    completed = dbs.completion_stats("default")[0]
    dead = sum(t["dead_tuples"] for t in tables)
    total = sum(t["bytes"] for t in tables)
    progress(f"churn ({label}): {completed:,} jobs run in {seconds} s; {dead:,} dead tuples, "
             f"{total / 2**20:,.0f} MB", final=True)
    return {"completed": completed, "tables": tables, "dead_tuples": dead, "bytes": total}
