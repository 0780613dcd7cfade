"""Async workers: ``async def perform`` runs on the worker process's one event loop."""

from __future__ import annotations

import threading
import time
import warnings

import pytest

import kathikon
from kathikon import signals
from kathikon.executor import run_job
from kathikon.runtime.loop import get_loop
from kathikon.testing import DrainResult, drain_queue
from tests.ecosystem import tasks, workers


def test_async_outcomes_match_sync_ones(db, insert_job):
    ok = insert_job(workers.AsyncEcho, {"value": 1})
    fails = insert_job(workers.AsyncFails)
    snooze = insert_job(workers.AsyncOutcome, {"kind": "snooze"})
    discard = insert_job(workers.AsyncOutcome, {"kind": "discard"})
    retry = insert_job(workers.AsyncOutcome, {"kind": "retry"})
    assert drain_queue() == DrainResult(completed=1, failed=2, discarded=1, snoozed=1)
    ok, fails, snooze, discard, retry = (kathikon.fetch(j.id) for j in
                                         (ok, fails, snooze, discard, retry))
    assert ok.state == "completed" and ok.result["echo"] == 1
    assert (fails.state, fails.errors[0]["kind"]) == ("retryable", "builtins.KeyError")
    assert 'raise KeyError("missing")' in fails.errors[0]["traceback"]
    assert (snooze.state, snooze.attempts) == ("scheduled", 0)
    assert (discard.state, discard.errors[0]["message"]) == ("dead", "not wanted")
    assert retry.state == "retryable"
    assert 50 <= (retry.available_at - ok.completed_at).total_seconds() <= 65


def test_async_timeout_fails_the_attempt_and_follows_the_retry_policy(db, insert_job):
    job = insert_job(workers.AsyncSlow)
    started = time.monotonic()
    assert drain_queue() == DrainResult(failed=1)
    assert time.monotonic() - started < 5
    job = kathikon.fetch(job.id)
    assert (job.state, job.errors[0]["kind"]) == ("retryable", "kathikon.JobTimeout")
    assert drain_queue(with_scheduled=True) == DrainResult(failed=1)
    assert kathikon.fetch(job.id).state == "dead"


def test_async_jobs_send_the_same_signals(db, insert_job):
    seen = []

    def record(sender, signal, **kwargs):
        seen.append((signal, sender, round(kwargs.get("duration") or 0, 1)))

    for signal in (signals.job_started, signals.job_completed, signals.job_failed):
        signal.connect(record, weak=False, dispatch_uid="ec-async")
    try:
        insert_job(workers.AsyncEcho, {"sleep": 0.1})
        insert_job(workers.AsyncFails)
        drain_queue()
    finally:
        for signal in (signals.job_started, signals.job_completed, signals.job_failed):
            signal.disconnect(dispatch_uid="ec-async")
    assert [(s, sender) for s, sender, _ in seen] == [
        (signals.job_started, workers.AsyncEcho), (signals.job_completed, workers.AsyncEcho),
        (signals.job_started, workers.AsyncFails), (signals.job_failed, workers.AsyncFails)]
    assert seen[1][2] >= 0.1


def test_every_async_job_of_a_process_runs_on_one_loop(db, insert_job):
    for value in range(5):
        insert_job(workers.AsyncEcho, {"value": value})
    drain_queue()
    assert {job.result["loop"] for job in kathikon.all()} == {id(get_loop())}


def test_many_async_jobs_run_concurrently_in_one_process(db, insert_job):
    """The runtime's pool threads each wait on the loop; the coroutines overlap there."""
    jobs = [insert_job(workers.AsyncEcho, {"value": n, "sleep": 0.5}) for n in range(30)]
    claimed = kathikon.storage.claim_jobs("default", 30, "ec-node")
    assert len(claimed) == len(jobs)
    results = []
    started = time.monotonic()
    threads = [threading.Thread(target=lambda job=job: results.append(run_job(job)))
               for job in claimed]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    elapsed = time.monotonic() - started
    assert [execution.kind for execution in results] == ["completed"] * 30
    assert elapsed < 8, f"30 jobs of 0.5 s took {elapsed:.1f} s: not concurrent"


@pytest.mark.slow
def test_a_worker_process_runs_many_async_jobs_at_once(worker_processes):
    count = 40
    kathikon.insert_many([(workers.AsyncEcho, {"value": n, "sleep": 1.0}) for n in range(count)])
    started = time.monotonic()
    worker = worker_processes.start("--burst", "--queues", f"default:{count}",
                                    settings={"POLL_INTERVAL": 0.2})
    assert worker.wait(timeout=30) == 0, worker.log()
    elapsed = time.monotonic() - started
    jobs = kathikon.all()
    assert {job.state for job in jobs} == {"completed"}
    assert len({job.result["loop"] for job in jobs}) == 1  # one event loop in the process
    assert elapsed < 25, f"{count} async jobs of 1 s took {elapsed:.1f} s (40 s in series)"


@pytest.mark.slow
def test_a_worker_process_runs_django_tasks(worker_processes):
    ok = tasks.add.enqueue(1, 2)
    coro = tasks.async_add.enqueue(3, 4)
    ctx = tasks.with_context.enqueue("w")
    bad = tasks.always_fails.enqueue("no")
    worker = worker_processes.start("--burst", settings={"POLL_INTERVAL": 0.2})
    assert worker.wait(timeout=30) == 0, worker.log()
    assert tasks.add.get_result(ok.id).return_value == 3
    assert tasks.async_add.get_result(coro.id).return_value == 7
    context = tasks.with_context.get_result(ctx.id)
    assert context.return_value["attempt"] == 1 and context.worker_ids[0] != "kathikon.testing"
    failed = tasks.always_fails.get_result(bad.id)
    assert (failed.status, failed.attempts) == ("FAILED", 2)  # backoff 0: --burst runs the retry
    assert failed.worker_ids[0] == context.worker_ids[0]


def test_a_forked_child_gets_its_own_loop():
    import os

    from kathikon.runtime.loop import run_coroutine

    async def answer():
        return os.getpid()

    assert run_coroutine(answer(), 5) == os.getpid()  # the parent's loop exists now
    read, write = os.pipe()
    with warnings.catch_warnings():  # "multi-threaded process, fork() may deadlock": we know
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: would hang on the parent's thread-less loop without the pid check
        try:
            os.write(write, str(run_coroutine(answer(), 5) == os.getpid()).encode())
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 10) == b"True" and status == 0


@pytest.mark.django_db(transaction=True)
def test_async_workers_use_the_async_orm():
    job = kathikon.insert(workers.AsyncOrm, {})
    assert drain_queue() == DrainResult(completed=1)
    assert kathikon.fetch(job.id).result == {"jobs": 1, "mine": "tests.ecosystem.workers.AsyncOrm"}
