"""The dispatcher as a claim loop, driven one claim at a time on an injected clock (no sleeps)."""

from __future__ import annotations

import pytest
from django.db import OperationalError

from kathikon.models import Job
from kathikon.runtime.acker import Acker
from kathikon.runtime.dispatcher import COALESCE, Dispatcher
from kathikon.runtime.pool import ExecutorPool

NODE = "step-node"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class HeldPool(ExecutorPool):
    """A real pool whose jobs stay in their slots until the test finishes them."""

    def __init__(self, concurrency: int, clock: Clock) -> None:
        super().__init__("default", concurrency, Acker(), clock=clock, watchdog=False)
        self.handed: list[Job] = []

    def run(self, jobs: list[Job]) -> None:
        self.handed.extend(jobs)

    def finish(self, count: int) -> None:
        with self.lock:
            for job in self.handed[:count]:
                del self._slots[id(job)]
                self._freed()
        del self.handed[:count]


class Backlog:
    """A claim function over ``size`` waiting jobs; ``fail`` makes the next claim raise."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.limits: list[int] = []
        self.fail = False

    def __call__(self, queue: str, limit: int, node: str) -> list[Job]:
        self.limits.append(limit)
        if self.fail:
            self.fail = False
            raise OperationalError("server closed the connection unexpectedly")
        taken = min(limit, self.size)
        self.size -= taken
        return [Job(queue=queue, worker="tests.workers.Succeed", attempted_by=node)
                for _ in range(taken)]


def make(concurrency: int = 4, backlog: int = 0, poll: float = 1.0):
    clock = Clock()
    pool = HeldPool(concurrency, clock)
    claim = Backlog(backlog)
    dispatcher = Dispatcher("default", concurrency, NODE, pool.acker, poll_interval=poll,
                            clock=clock, claim=claim, pool=pool)
    return dispatcher, pool, claim, clock


def test_dispatcher_claims_at_start_up_to_the_free_slots():
    dispatcher, pool, claim, _ = make(concurrency=4, backlog=10)
    assert dispatcher.due_in() <= 0
    assert dispatcher.step() == 4
    assert claim.limits == [4] and len(pool.handed) == 4
    assert dispatcher.step() is None  # no free slot: nothing is due
    assert not dispatcher.idle


def test_dispatcher_a_full_claim_claims_again_when_slots_free_coalesced():
    dispatcher, pool, claim, clock = make(concurrency=4, backlog=10)
    dispatcher.step()
    pool.finish(1)  # one of four slots: wait briefly for others to free too
    assert dispatcher.due_in() == pytest.approx(COALESCE)
    assert dispatcher.step() is None
    pool.finish(1)  # half the slots free: claim now
    assert dispatcher.due_in() <= 0
    assert dispatcher.step() == 2 and claim.limits == [4, 2]
    pool.finish(1)
    clock.advance(COALESCE)
    assert dispatcher.step() == 1


def test_dispatcher_a_short_claim_sleeps_until_the_next_poll_or_a_wake():
    dispatcher, pool, claim, clock = make(concurrency=4, backlog=1, poll=5.0)
    assert dispatcher.step() == 1
    pool.finish(1)
    assert dispatcher.due_in() == pytest.approx(5.0)  # the queue looked empty
    assert dispatcher.idle
    clock.advance(2.0)
    dispatcher.wake()  # a NOTIFY
    assert dispatcher.step() == 0 and claim.limits == [4, 4]
    dispatcher.wake_at(clock.now + 1.5)  # a retry comes due before the next poll
    assert dispatcher.due_in() == pytest.approx(1.5)
    clock.advance(1.5)
    assert dispatcher.step() == 0
    assert dispatcher.due_in() == pytest.approx(5.0)
    clock.advance(5.0)
    assert dispatcher.step() == 0 and len(claim.limits) == 4


def test_dispatcher_a_failed_claim_backs_off_then_recovers_lost_claims(db):
    dispatcher, _, claim, clock = make(concurrency=2, backlog=3)
    claim.fail = True
    assert dispatcher.step() == 0 and dispatcher.failures == 1
    assert dispatcher.due_in() == pytest.approx(0.2)
    assert dispatcher.step() is None
    clock.advance(0.2)
    assert dispatcher.step() == 2  # releases what the lost claim committed (none here) first
    assert dispatcher.failures == 0 and dispatcher.claimed == 2


def test_dispatcher_concurrency_changes_and_stop():
    dispatcher, pool, claim, _ = make(concurrency=2, backlog=10)
    dispatcher.step()
    dispatcher.set_concurrency(5)
    assert dispatcher.step() == 3 and claim.limits == [2, 3]
    pool.finish(5)
    dispatcher.stop_claiming()
    assert dispatcher.step() is None
