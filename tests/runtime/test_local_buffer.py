"""The dispatcher's local buffer: large claims while a backlog of fast jobs waits, none otherwise,
and a buffer that goes back at once (attempt restored) when the worker stops."""

from __future__ import annotations

import threading

import pytest

import kathikon
from kathikon import storage
from kathikon.models import Job
from kathikon.runtime.acker import Acker
from kathikon.runtime.dispatcher import BUFFER_PER_SLOT, FAST_JOB, Dispatcher
from kathikon.runtime.pool import ExecutorPool

from . import poison_workers as poison
from .conftest import serve_pool, wait_until
from .test_dispatcher_steps import Backlog, Clock

NODE = "buffer-node"


class RunPool(ExecutorPool):
    """A real pool whose handed-over jobs the test starts and finishes, ``run_time`` each."""

    def __init__(self, concurrency: int, clock: Clock) -> None:
        super().__init__("default", concurrency, Acker(), clock=clock, watchdog=False)
        self.handed: list[Job] = []

    def run(self, jobs: list[Job]) -> None:
        self.handed.extend(jobs)

    def complete(self, count: int, run_time: float) -> None:
        with self.lock:
            for job in self.handed[:count]:
                self._queued -= 1
                del self._slots[id(job)]
                self.finished += 1
                self.run_time = run_time
                self._freed()
        del self.handed[:count]


def make(concurrency: int, backlog: int):
    clock = Clock()
    pool = RunPool(concurrency, clock)
    claim = Backlog(backlog)
    dispatcher = Dispatcher("default", concurrency, NODE, pool.acker, clock=clock, claim=claim,
                            pool=pool)
    return dispatcher, pool, claim


def drain(dispatcher: Dispatcher, pool: RunPool, run_time: float, rounds: int) -> None:
    """Claim whenever a claim is due; else let the jobs of one thread-full finish."""
    for _ in range(rounds):
        if dispatcher.step() is None:
            pool.complete(pool.concurrency, run_time)


def test_a_backlog_of_fast_jobs_grows_the_claims_up_to_the_buffer():
    dispatcher, pool, claim = make(concurrency=4, backlog=10_000)
    drain(dispatcher, pool, 0.0001, 200)
    most = 4 + BUFFER_PER_SLOT * 4
    assert claim.limits[0] == 4  # nothing known about the jobs yet: only what runs
    assert max(claim.limits) > 4  # then the buffer fills too ...
    assert pool.prefetch == BUFFER_PER_SLOT * 4 and pool.holding() <= most  # ... bounded
    # A refill waits until a third of the held jobs ran, so it is a large claim, not a
    # trickle; and it takes half of the pool at most, so the next claim fits beside it.
    refills = claim.limits[-5:]
    assert min(refills) >= most // 3 and max(refills) <= most // 2


def test_claims_follow_each_other_while_the_threads_run_the_last_one():
    """With a backlog of fast jobs the next claim is begun with the last one's hand-over:
    no job has to finish (and no slot free) before the database is asked for more."""
    dispatcher, pool, claim = make(concurrency=4, backlog=10_000)
    drain(dispatcher, pool, 0.0001, 40)  # the buffer has grown to its size
    pool.complete(len(pool.handed), 0.0001)
    assert pool.holding() == 0
    claims = len(claim.limits)
    while (taken := dispatcher.step()) is not None:  # no job finishes in this loop
        assert taken > 0
    most = 4 + BUFFER_PER_SLOT * 4
    assert len(claim.limits) - claims >= 2  # claims in a row, none waiting for a slot
    assert most * 2 // 3 <= pool.holding() <= most  # until two thirds of the pool are held
    assert dispatcher.due_in() > 0  # then the next one waits for the threads


def test_slow_jobs_are_never_buffered():
    dispatcher, pool, claim = make(concurrency=4, backlog=10_000)
    drain(dispatcher, pool, FAST_JOB * 2, 40)
    assert pool.prefetch == 0
    assert max(claim.limits) == 4 and pool.holding() <= 4


def test_the_buffer_empties_when_the_backlog_is_gone():
    dispatcher, pool, claim = make(concurrency=4, backlog=60)
    drain(dispatcher, pool, 0.0001, 60)
    assert claim.size == 0 and max(claim.limits) > 4
    assert pool.prefetch == 0  # the short claim dropped it: an idle queue hoards nothing
    pool.complete(len(pool.handed), 0.0001)
    assert dispatcher.idle


@pytest.fixture
def real_pool(transactional_db):
    yield from serve_pool(ExecutorPool("default", 1, Acker().start(), watchdog=False))


def test_stopping_returns_the_buffer_at_once_with_its_attempts_restored(real_pool):
    held = kathikon.insert(poison.Held, {"key": "buffer", "wait": 30})
    kathikon.insert_many([(poison.Held, {"key": f"b{i}", "wait": 30}) for i in range(3)])
    jobs = storage.claim_jobs("default", 4, NODE)
    assert jobs[0].id == held.id and all(job.attempts == 1 for job in jobs)
    real_pool.prefetch = 3
    real_pool.submit(jobs)  # one thread: the first job runs, three wait in the buffer
    wait_until(lambda: real_pool.held == 4 and real_pool.queued() == 3, 10,
               message="the first job started, three buffered")
    real_pool.stop_accepting()
    assert real_pool.held == 1 and real_pool.queued() == 0
    assert real_pool.acker.flush(10)
    buffered = Job.objects.exclude(id=held.id)
    assert sorted(buffered.values_list("state", "attempts")) == [("available", 0)] * 3
    assert Job.objects.get(id=held.id).state == "running"  # still running here
    poison.HELD.setdefault("buffer", threading.Event()).set()
    wait_until(lambda: real_pool.held == 0, 10, message="the running job finished")
    assert real_pool.acker.flush(10)
    assert Job.objects.get(id=held.id).state == "completed"


def test_a_claim_begun_by_the_last_one_is_dropped_when_the_dispatcher_stops_or_holds():
    for stop in (lambda d: d.stop_claiming(), lambda d: d.hold(True)):
        dispatcher, pool, claim = make(concurrency=4, backlog=10_000)
        drain(dispatcher, pool, 0.0001, 40)
        pool.complete(len(pool.handed), 0.0001)
        dispatcher.step()  # a full claim with the buffer on: the next one is begun
        assert not dispatcher.quiet  # a claim is on its way
        claims = len(claim.limits)
        stop(dispatcher)
        assert dispatcher.step() is None and len(claim.limits) == claims  # not sent
        held = pool.held_ids()
        pool.handed = [job for job in pool.handed if job.id in held]  # not released
        pool.complete(len(pool.handed), 0.0001)
        assert dispatcher.quiet  # nothing held, no claim in flight


def test_a_buffered_hand_over_wakes_one_thread_for_fast_jobs(frozen_pool):
    """Eight idle threads; 40 jobs of 50 µs are 2 ms of work: one thread wakes and runs
    them one after the other (a frozen clock: no job counts as slow, nothing else wakes)."""
    pool = frozen_pool
    kathikon.insert_many([(workers_succeed(), {"i": i}) for i in range(48)])
    pool.submit(storage.claim_jobs("default", 8, NODE))  # unbuffered: a thread per job
    wait_until(lambda: pool.held == 0 and pool.idle_threads == 8, 10,
               message="eight threads ran a job each and wait for the next")
    pool.ran_on.clear()
    woken = pool.thread_wakeups
    jobs = storage.claim_jobs("default", 40, NODE)
    pool.prefetch, pool.run_time = 40, 0.00005
    pool.submit(jobs)
    assert pool.thread_wakeups - woken == 1  # not one per job: all eight idle threads
    wait_until(lambda: pool.held == 0, 10, message="the buffered jobs ran")
    assert pool.acker.flush(10)
    assert Job.objects.filter(state="completed").count() == 48
    assert len(pool.ran_on) == 40 and len(set(pool.ran_on)) == 1


@pytest.mark.parametrize(("cpu_share", "woken"), [(0.9, 1), (0.1, 8)],
                         ids=["process on the CPU", "process mostly waiting"])
def test_a_process_bound_by_its_cpu_wakes_one_thread_per_hand_over(
        clocked_pool, cpu_share, woken):
    """Jobs of 2 ms each: 40 are 80 ms of work, so every idle thread wakes, unless the
    process spent the time since the last hand-over on the CPU: more threads would only
    wait for the GIL (on a 2-core box with 100 threads, 2 context switches per job)."""
    pool = clocked_pool
    kathikon.insert_many([(workers_succeed(), {"i": i}) for i in range(48)])
    pool.submit(storage.claim_jobs("default", 8, NODE))  # unbuffered: a thread per job
    wait_until(lambda: pool.held == 0 and pool.idle_threads == 8, 10,
               message="eight threads ran a job each and wait for the next")
    pool.clock.advance(0.1)
    pool.cpu_clock.advance(0.1 * cpu_share)
    woken_before = pool.thread_wakeups
    pool.prefetch, pool.run_time = 40, 0.002
    pool.submit(storage.claim_jobs("default", 40, NODE))
    assert pool.thread_wakeups - woken_before == woken
    wait_until(lambda: pool.held == 0, 10, message="the buffered jobs ran")
    assert pool.acker.flush(10)
    assert Job.objects.filter(state="completed").count() == 48


def test_jobs_buffered_behind_a_job_that_turned_slow_get_an_idle_thread(real_fast_pool):
    """The hand-over woke one thread for what looked like fast jobs; the first one blocks.
    The jobs behind it must not wait for it while seven threads are idle."""
    pool = real_fast_pool
    kathikon.insert(poison.Held, {"key": "slow", "wait": 30})
    kathikon.insert_many([(workers_succeed(), {"i": i}) for i in range(5)])
    jobs = storage.claim_jobs("default", 6, NODE)
    assert jobs[0].worker.endswith("Held")
    pool.prefetch, pool.run_time = 40, 0.00005
    pool.submit(jobs)
    wait_until(lambda: Job.objects.filter(state="completed").count() == 5, 5,
               message="the fast jobs ran while the slow one still runs")
    assert Job.objects.get(worker__endswith="Held").state == "running"
    poison.HELD.setdefault("slow", threading.Event()).set()


def workers_succeed():
    from tests import workers

    return workers.Succeed


class RecordingPool(ExecutorPool):
    """A real pool that notes which thread began each job."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.ran_on: list[int] = []

    def _begin(self, job):
        self.ran_on.append(threading.get_ident())
        return super()._begin(job)


@pytest.fixture
def frozen_pool(transactional_db):
    yield from serve_pool(RecordingPool("default", 8, Acker().start(), clock=Clock(),
                                        watchdog=False))


@pytest.fixture
def clocked_pool(transactional_db):
    """Both of its clocks (wall and this process's CPU) move only when the test says."""
    yield from serve_pool(RecordingPool("default", 8, Acker().start(), clock=Clock(),
                                        cpu_clock=Clock(), watchdog=False))


@pytest.fixture
def real_fast_pool(transactional_db):
    yield from serve_pool(RecordingPool("default", 8, Acker().start()))  # real clock, watchdog
