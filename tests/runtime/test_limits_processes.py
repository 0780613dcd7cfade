"""Global, partitioned and rate limits with real ``kathikon_worker`` processes."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

import kathikon
from kathikon import storage
from kathikon.models import Job
from kathikon.storage.limited import window_start
from tests.runtime.conftest import wait_until
from tests.runtime.limits_workers import Timed, max_overlap, spans

pytestmark = pytest.mark.slow


def settings(queue: dict[str, Any]) -> dict[str, Any]:
    return {"QUEUES": {"flow": queue}, "POLL_INTERVAL": 0.2, "HEARTBEAT_INTERVAL": 1,
            "SCHEDULER_INTERVAL": 0.5}


def run_all(worker_processes: Any, processes: int, queue: dict[str, Any], total: int,
            timeout: float) -> None:
    workers = worker_processes.start_many(processes, settings=settings(queue))
    for worker in workers:
        worker.wait_for_log(f"kathikon worker {worker.args[-1]} running", timeout=60)
    wait_until(lambda: storage.count_by_state("flow")["completed"] == total, timeout=timeout,
               interval=0.2, message=f"{total} jobs to complete")


def throughput(rows: list[tuple[str, str, float, float]]) -> float:
    return len(rows) / (max(row[3] for row in rows) - min(row[2] for row in rows))


def test_four_processes_never_run_more_than_the_global_limit(worker_processes: Any,
                                                              tmp_path: Path):
    log, seconds, total = tmp_path / "spans", 0.5, 36
    kathikon.insert_many([(Timed, {"log": str(log), "seconds": seconds}, {"queue": "flow"})
                          for _ in range(total)])
    # Two slots per process: eight in all, held to three by the limit; and three at once
    # needs two processes at least. (With ten slots each, the first process up took all
    # three and, re-claiming on its own acks at once, could keep them to the end.)
    run_all(worker_processes, 4, {"concurrency": 2, "global_limit": 3}, total, timeout=90)
    rows = spans(log)
    assert len(rows) == total
    assert max_overlap([(start, end) for _, _, start, end in rows]) == 3
    rate = throughput(rows)
    print(f"global_limit 3, {seconds}s jobs: {rate:.2f} jobs/s (ideal {3 / seconds:.2f})")
    assert rate >= 0.7 * 3 / seconds
    assert len({job.attempted_by for job in Job.objects.filter(queue="flow")}) >= 2


def test_four_hundred_jobs_over_twenty_accounts_one_at_a_time_each(worker_processes: Any,
                                                                   tmp_path: Path):
    # 20 jobs per account: every account's jobs are handed from process to process many
    # times over, and the run is long enough (8 s at the ideal rate) to measure the rate.
    log, seconds, total = tmp_path / "spans", 0.4, 400
    kathikon.insert_many([(Timed, {"log": str(log), "seconds": seconds, "account": i % 20},
                           {"queue": "flow"}) for i in range(total)])
    queue = {"concurrency": 15, "partition": {"by": "args.account", "limit": 1}}
    run_all(worker_processes, 3, queue, total, timeout=120)
    rows = spans(log)
    assert len(rows) == total
    by_account: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for _, account, start, end in rows:
        by_account[account].append((start, end))
    assert len(by_account) == 20
    assert {account: max_overlap(spans_) for account, spans_ in by_account.items()} == {
        account: 1 for account in by_account}
    rate = throughput(rows)
    print(f"20 accounts x 1, {seconds}s jobs: {rate:.1f} jobs/s (ideal {20 / seconds:.0f})")
    assert max_overlap([(start, end) for _, _, start, end in rows]) >= 15  # in parallel
    # Half the ideal rate on a loaded 2-core box; one account at a time across the queue
    # (the failure this guards against) would give 1/20 of it.
    assert rate >= 0.5 * 20 / seconds


def test_five_per_second_per_api_key_over_three_processes(worker_processes: Any,
                                                          tmp_path: Path):
    log, total = tmp_path / "spans", 80
    kathikon.insert_many([(Timed, {"log": str(log), "seconds": 0.02, "account": i % 2},
                           {"queue": "flow"}) for i in range(total)])
    queue = {"concurrency": 10, "rate_limit": {"allowed": 5, "period": 1, "by": "args.account"}}
    run_all(worker_processes, 3, queue, total, timeout=60)
    jobs = list(Job.objects.filter(queue="flow"))
    per_window = Counter((job.args["account"], window_start(job.started_at, 1.0)) for job in jobs)
    assert max(per_window.values()) <= 5
    windows = sorted({window for _, window in per_window})[1:-1]  # full windows only
    rate = sum(per_window[(account, window)] for account in (0, 1)
               for window in windows) / len(windows)
    print(f"rate 5/s per key, 2 keys: {rate:.2f} starts/s over {len(windows)} full windows")
    assert len(windows) >= 5
    assert rate >= 9.0


def test_ten_per_second_over_three_processes(worker_processes: Any, tmp_path: Path):
    log, total = tmp_path / "spans", 130
    kathikon.insert_many([(Timed, {"log": str(log), "seconds": 0.02}, {"queue": "flow"})
                          for _ in range(total)])
    queue = {"concurrency": 10, "rate_limit": {"allowed": 10, "period": 1}}
    run_all(worker_processes, 3, queue, total, timeout=60)
    starts = sorted(job.started_at for job in Job.objects.filter(queue="flow"))
    per_window = Counter(window_start(at, 1.0) for at in starts)
    assert max(per_window.values()) <= 10  # the limiter's own clock: started_at
    full = sorted(per_window)[1:-1]  # the first and last windows are partial
    counts = [per_window[window] for window in full]
    rate = sum(counts) / len(counts)
    print(f"rate 10/s: {rate:.2f} starts/s over {len(counts)} full windows")
    assert len(counts) >= 10
    assert rate >= 9.0
    assert len({job.attempted_by for job in Job.objects.filter(queue="flow")}) >= 2
