"""A pre-filled drain by real ``kathikon_worker`` processes, and the fill before it.

Shared by the phases that measure a drain (benchmarks.runner and the phase modules
beside it): the rate from the jobs' own completion times, and the CPU per job of the
workers and of the database once they run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from benchmarks import dbs
from benchmarks.procs import Workers, machine_busy_seconds, tree_cpu_seconds


def order(pairs: int, kinds: tuple[str, ...]) -> list[str]:
    """``pairs`` pairs of the two kinds, alternated A B, B A, A B … (one kind: ``pairs``
    runs), so that load drifting on a shared machine hits both kinds alike."""
    if len(kinds) == 1:
        return list(kinds) * pairs
    first, second = kinds
    turns: list[str] = []
    for turn in range(pairs):
        turns += [first, second] if turn % 2 == 0 else [second, first]
    return turns


def fill(n: int, per_call: int, progress: Any = None) -> float:
    """Insert ``n`` no-op jobs with ``insert_many``; returns the seconds it took."""
    import kathikon
    from benchmarks.workers import NoopWorker

    started = time.perf_counter()
    done = 0
    while done < n:
        size = min(per_call, n - done)
        kathikon.insert_many([(NoopWorker, {"i": done + i}) for i in range(size)],
                             chunk_size=5000)
        done += size
        if progress:
            elapsed = time.perf_counter() - started
            progress(f"filling {done:,}/{n:,} ({done / elapsed:,.0f} jobs/s)")
    return time.perf_counter() - started


def drain(n: int, procs: int, size: dict[str, Any], progress: Any, log_dir: Path,
           label: str, *, prefilled: bool = False, env: dict[str, str] | None = None,
           queue: str | None = None) -> dict[str, Any]:
    """Drain ``n`` jobs with ``procs`` worker processes; ``queue``: count only its completed
    jobs (the others are history loaded beforehand)."""
    if not prefilled:
        dbs.reset()
        fill(n, size["fill_call"])
        dbs.settle_table()
    started = time.monotonic()
    remaining = n
    # (pending, worker CPU, backend CPU, the machine's busy CPU, when)
    cpu_first: tuple[int, float, float, float, float] | None = None
    with Workers(procs, log_dir, env=env) as workers:
        while remaining > 0 and time.monotonic() - started < size["drain_timeout"]:
            time.sleep(0.2)
            workers.check_alive()
            remaining = dbs.count_pending()
            if cpu_first is None and remaining < n:
                cpu_first = (remaining, tree_cpu_seconds(workers.pids), dbs.backend_cpu(),
                             machine_busy_seconds(), time.monotonic())
            progress(f"{label}: {n - remaining:,}/{n:,} done")
        cpu_last = (remaining, tree_cpu_seconds(workers.pids), dbs.backend_cpu(),
                    machine_busy_seconds(), time.monotonic())
        wall = time.monotonic() - started
    count, span = dbs.completion_stats(queue)
    rate = (count - 1) / span if span > 0 else 0.0
    timed_out = remaining > 0
    cpu = {}
    if cpu_first and cpu_first[0] > cpu_last[0]:  # CPU per job once running (start-up excluded)
        jobs = cpu_first[0] - cpu_last[0]
        cpu = {"worker_cpu_us_per_job": (cpu_last[1] - cpu_first[1]) / jobs * 1e6}
        if dbs.vendor_of_connection() == "postgres":  # a server process per connection
            cpu["db_cpu_us_per_job"] = (cpu_last[2] - cpu_first[2]) / jobs * 1e6
        # cores kept busy meanwhile (the database's and everyone's), of the machine's
        cpu["cores_busy"] = (cpu_last[3] - cpu_first[3]) / (cpu_last[4] - cpu_first[4])
        cpu["cores"] = os.cpu_count() or 1
    cpu_text = ""
    if cpu:
        cpu_text = f"; CPU/job: worker {cpu['worker_cpu_us_per_job']:.0f} us"
        if "db_cpu_us_per_job" in cpu:
            cpu_text += f", database {cpu['db_cpu_us_per_job']:.0f} us"
    if "cores_busy" in cpu:
        cpu_text += f"; {cpu['cores_busy']:.2f} of {cpu['cores']} cores busy"
    progress(f"{label}: {rate:,.0f} jobs/s steady state ({count:,} jobs, wall {wall:.1f} s"
             f"{', TIMED OUT' if timed_out else ''}){cpu_text}", final=True)
    return {"n": n, "processes": procs, "completed": count, "rate": rate, "wall": wall,
            "timed_out": timed_out, **cpu}
