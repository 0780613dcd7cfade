"""Liveness is progress, not pulse: an acker that writes nothing is stalled, however alive."""

from __future__ import annotations

import threading

import kathikon
from kathikon import storage
from kathikon.executor import record, run_job
from kathikon.runtime import acker as acker_module
from kathikon.runtime.acker import Acker
from kathikon.runtime.worker import WorkerProcess
from tests import workers

NODE = "liveness-node"


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_acker_stalled_for_counts_from_work_arriving_to_a_write(transactional_db, monkeypatch):
    kathikon.insert_many([(workers.Succeed, {}) for _ in range(2)])
    first, second = [run_job(job) for job in storage.claim_jobs("default", 2, NODE)]
    entered, release = threading.Event(), threading.Event()

    def blocked_record(batch):
        entered.set()
        release.wait(10)  # a write blocked on a row lock
        return record(batch)

    monkeypatch.setattr(acker_module, "record", blocked_record)
    clock = Clock()
    acker = Acker(clock=clock).start()
    try:
        clock.now = 60.0
        assert acker.stalled_for() == 0.0  # idle: nothing to write is no stall
        acker.add(first)
        assert entered.wait(5)
        clock.now = 64.0
        acker.add(second)  # queued behind the blocked write: the stall does not restart
        assert acker.stalled_for() == 4.0 and acker.alive
        release.set()
        assert acker.flush(5)
        assert acker.stalled_for() == 0.0 and acker.written == 2
    finally:
        release.set()
        acker.stop(5)


def test_worker_process_exits_non_zero_when_its_acker_stalls(transactional_db, monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(acker_module, "ack_jobs", lambda acks: release.wait(10))
    process = WorkerProcess(node=NODE, handle_signals=False, services=(), poll_interval=0.1)
    process.rescue_after = 3.0
    clock = Clock()
    process.acker.clock = clock
    process.acker.start()
    try:
        assert process._healthy()
        job = kathikon.insert(workers.Succeed, {})
        process.acker.release([storage.Ack(job, "available")])  # its write blocks
        clock.now += 2.5
        assert process._healthy()
        clock.now += 1.0
        assert not process._healthy() and process.acker_stalled
    finally:
        release.set()
        process.acker.stop(5)


def test_worker_process_waits_out_a_database_outage_however_long(transactional_db, monkeypatch):
    """An outage is not a wedge: the stall counts only while the database answers."""
    from kathikon.storage import hygiene

    release = threading.Event()
    monkeypatch.setattr(acker_module, "ack_jobs", lambda acks: release.wait(10))
    answers = [False]
    monkeypatch.setattr(hygiene, "database_answers", lambda alias: answers[0])
    process = WorkerProcess(node=NODE, handle_signals=False, services=(), poll_interval=0.1)
    process.rescue_after = 3.0
    clock = Clock()
    process.acker.clock = clock
    process.acker.start()
    try:
        process.acker.release([storage.Ack(kathikon.insert(workers.Succeed, {}), "available")])
        clock.now += 30.0  # a long outage
        assert process._healthy()
        answers[0] = True  # the database is back: the acker gets RESCUE_AFTER to catch up
        clock.now += 2.0
        assert process._healthy()
        clock.now += 2.0
        assert not process._healthy() and process.acker_stalled
    finally:
        release.set()
        process.acker.stop(5)
