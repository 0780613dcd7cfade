"""Internal: the executor pool of one queue — its threads, its slots and their watchdog.

A claimed job takes a slot; an executor thread runs it with the shared
:class:`~kathikon.executor.Executor`, hands the outcome to the process's acker
and frees the slot. The dispatcher only claims: it asks the pool how many jobs
it takes (:meth:`ExecutorPool.capacity`) and hands them over
(:meth:`ExecutorPool.submit`).

Local buffer: the pool runs at most ``concurrency`` jobs at once but holds up
to ``prefetch`` more (the dispatcher sets it: a few claims' worth while a
backlog of fast jobs waits, 0 otherwise). Buffered jobs are claimed in the
database like running ones (``running`` under this node, so the lifeline
rescues them if the node dies); an executor thread that finishes a job takes
the next buffered one without waiting for a claim. At shutdown the buffer goes
back at once (``available``, attempt restored).

The watchdog (one thread per pool, :meth:`ExecutorPool.watch`) keeps every
slot moving:

- Timeouts: a synchronous ``perform`` cannot be interrupted, so when a job
  overruns its limit the attempt fails with ``JobTimeout`` (a fenced ack: the
  job follows its retry policy), its slot is freed and a replacement thread
  starts. The abandoned thread keeps running until ``perform`` returns; its
  late outcome is discarded. Async jobs are cancelled in the event loop first
  (``ASYNC_MARGIN`` later the watchdog steps in, e.g. for a blocked loop).
- Liveness: an executor thread that died holding a slot (a bug, or an
  exception injected into it) frees the slot, its job is recorded as a failed
  attempt (``ExecutorThreadDied``) and a replacement thread starts.

Every thread of the pool shares one lock; :attr:`ExecutorPool.changed` (a
condition on it) is notified whenever a slot frees, so a dispatcher can wait
on it for its next claim.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connections

from kathikon.exceptions import ExecutorThreadDied, JobTimeout
from kathikon.executor import Execution, Executor, Plan, fail_job
from kathikon.models import Job
from kathikon.runtime.acker import Acker
from kathikon.runtime.inbox import Inbox
from kathikon.runtime.threads import new_thread
from kathikon.states import JobState
from kathikon.storage import Ack, hygiene
from kathikon.tracing.hooks import ended_elsewhere

logger = logging.getLogger("kathikon.runtime")

ASYNC_MARGIN = 2.0  # async jobs time out in the event loop; this is the fallback
WATCH_EVERY = 1.0   # seconds between liveness checks of the executor threads
HANDOVER_TIME = 0.002  # seconds: a buffered hand-over wakes enough threads to run it in this
# long at the jobs' mean run time; a job running longer than this counts as slow
HELP_EVERY = 0.01  # seconds between the watchdog's checks for slow jobs while the pool buffers
# Above this share of the wall-clock time on the CPU, more threads would only take turns
# for the GIL (and count the turns as run time). Not 1: a process taking turns with others
# for the cores (two workers and PostgreSQL on two) is on the CPU ~40% of the time.
CPU_BOUND = 0.3


@dataclass(slots=True, eq=False)
class Slot:
    """A claimed job and, once a thread runs it, that thread, when it started and must end."""

    job: Job
    plan: Plan | None = None
    thread: threading.Thread | None = None
    started: float = 0.0
    deadline: float | None = None
    timeout: float | None = None
    abandoned: bool = False


class ExecutorPool:
    """Runs the claimed jobs of one queue on up to ``concurrency`` threads.

    ``clock`` (monotonic seconds) and ``cpu_clock`` (this process's CPU seconds) are
    injectable for tests; ``watchdog=False`` leaves :meth:`watch` to the caller (tests
    drive it one step at a time).
    """

    def __init__(self, queue: str, concurrency: int, acker: Acker, *,
                 executor: Executor | None = None, clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = time.process_time,
                 watchdog: bool = True) -> None:
        self.queue = queue
        self.concurrency = concurrency
        self.acker = acker
        self.executor = executor or Executor()
        self.clock = clock
        self.cpu_clock = cpu_clock
        self._load_since = (clock(), cpu_clock())  # the last hand-over's wall and CPU clocks
        self.finished = 0          # jobs whose outcome went to the acker from their thread
        self.timed_out = 0         # jobs failed by the timeout watchdog
        self.abandoned_threads = 0
        self.died = 0              # executor threads that died holding a slot
        self.prefetch = 0          # jobs held beyond ``concurrency`` (set by the dispatcher)
        self.run_time = 0.0        # recent jobs' mean run time, seconds (moving average)
        self._queued = 0           # slots handed over whose job has not started
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)   # a slot freed (the dispatcher waits)
        self._watch_cond = threading.Condition(self.lock)  # a deadline was set, or closing
        self._slots: dict[int, Slot] = {}  # keyed by id(job): cheaper than hashing UUIDs
        self._inbox: Inbox[Job | None] = Inbox()
        self._threads: set[threading.Thread] = set()
        self._accepting = True
        self._closed = False
        self._next_deadline: float | None = None
        self._helping = False  # the pool buffers: the watchdog wakes threads for slow jobs
        self._watchdog_wanted = watchdog
        self._watchdog: threading.Thread | None = None
        self.on_freed: Callable[[], None] | None = None  # called with the lock held

    # -- the dispatcher's side (any thread) --------------------------------------------------

    def capacity(self) -> int:
        """How many more jobs the pool takes now (the caller holds :attr:`lock`)."""
        return self.concurrency + self.prefetch - len(self._slots)

    def holding(self) -> int:
        """Jobs holding a slot (the caller holds :attr:`lock`)."""
        return len(self._slots)

    def queued(self) -> int:
        """Jobs handed over that no thread has started yet (the caller holds :attr:`lock`)."""
        return self._queued

    @property
    def held(self) -> int:
        """Jobs holding a slot: running, or handed over and about to start."""
        with self.lock:
            return len(self._slots)

    @property
    def idle_threads(self) -> int:
        """Executor threads waiting for a job."""
        return self._inbox.waiting

    @property
    def thread_wakeups(self) -> int:
        """How many times an idle executor thread was woken for a job, since the start."""
        return self._inbox.wakeups

    def held_ids(self) -> set[object]:
        with self.lock:
            return {slot.job.id for slot in self._slots.values()}

    def submit(self, jobs: list[Job]) -> None:
        """Take ``jobs`` (at most :meth:`capacity`) and run them."""
        with self.lock:
            self.take(jobs)
        self.run(jobs)

    def take(self, jobs: list[Job]) -> None:
        """Give ``jobs`` their slots (the caller holds :attr:`lock`); then :meth:`run` them."""
        for job in jobs:
            self._slots[id(job)] = Slot(job)
        self._queued += len(jobs)
        while len(self._threads) < min(len(self._slots), self.concurrency):
            self._start_thread()
        if self._watchdog_wanted and self._watchdog is None:
            watchdog = new_thread(self._watch_loop, name=f"kathikon-{self.queue}-watch")
            watchdog.start()  # before it is seen: an unstarted thread is not alive
            self._watchdog = watchdog

    def run(self, jobs: list[Job]) -> None:
        """Hand jobs that have their slots (:meth:`take`) to the executor threads.

        Unbuffered, every job gets a thread at once. Buffered (fast jobs), only as many
        threads wake as run the hand-over in about ``HANDOVER_TIME``: a few threads take
        microsecond jobs one after the other without a context switch each. A process
        bound by its CPU wakes one: the threads awake keep taking jobs, and more would
        only wait for the GIL, which their jobs' run time would count (more wake-ups).
        """
        wake = None
        if self.prefetch:
            wake = 1 if self._cpu_bound() else math.ceil(
                len(jobs) * self.run_time / HANDOVER_TIME)
            if not self._helping:  # the watchdog now looks for slow jobs every HELP_EVERY
                with self.lock:
                    self._helping = True
                    self._watch_cond.notify_all()
        self._inbox.put(list(jobs), wake)

    @property
    def watchdog_alive(self) -> bool:
        return self._watchdog is None or self._watchdog.is_alive() or self._closed

    def stop_accepting(self) -> None:
        """Jobs handed over but not started yet go back to ``available`` (shutdown): the
        buffer at once, a job a thread is about to start when that thread gets to it."""
        with self.lock:
            self._accepting = False
            waiting = [slot for slot in self._slots.values()
                       if slot.thread is None and not slot.abandoned]
            for slot in waiting:
                slot.abandoned = True
                del self._slots[id(slot.job)]
            self._queued -= len(waiting)
            if waiting:
                logger.info("kathikon: %d claimed job(s) not started yet at shutdown; released "
                            "(attempt restored)", len(waiting))
                self.acker.release([Ack(slot.job, JobState.AVAILABLE, restore_attempt=True)
                                    for slot in waiting])
                self._freed()

    def wait_running(self, timeout: float) -> bool:
        """Wait until no job holds a slot; ``False`` on timeout."""
        with self.changed:
            return self.changed.wait_for(lambda: not self._slots, max(0.0, timeout))

    def abandon_running(self) -> list[Job]:
        """Give up on every job still held; their threads' outcomes are discarded.
        Returns the jobs, to be released."""
        with self.lock:
            slots = list(self._slots.values())
            for slot in slots:
                slot.abandoned = True
            self._slots.clear()
            self._queued = 0
            self.changed.notify_all()
        return [slot.job for slot in slots]

    def close(self) -> None:
        """Let the idle executor threads and the watchdog end (after :meth:`abandon_running`)."""
        with self.lock:
            self._closed = True
            threads = len(self._threads)
            self._watch_cond.notify_all()
        self._inbox.put([None] * threads)

    def _cpu_bound(self) -> bool:
        """Was this process on the CPU for more than ``CPU_BOUND`` of the time since the
        last hand-over?"""
        wall, cpu = self.clock(), self.cpu_clock()
        since_wall, since_cpu = self._load_since
        self._load_since = (wall, cpu)
        return wall > since_wall and cpu - since_cpu >= CPU_BOUND * (wall - since_wall)

    # -- the watchdog ------------------------------------------------------------------------

    def watch(self, now: float | None = None) -> float:
        """Fail overdue jobs and jobs of dead threads, free their slots, replace their threads.

        Returns the seconds until the next check is due.
        """
        now = self.clock() if now is None else now
        with self.lock:
            for slot in list(self._slots.values()):
                if slot.thread is not None and not slot.thread.is_alive():
                    self._thread_gone(slot, ExecutorThreadDied(
                        f"the thread running this job ({slot.thread.name}) died"), now)
                elif slot.deadline is not None and now >= slot.deadline:
                    self._expire(slot, now)
            dead = [thread for thread in self._threads if not thread.is_alive()
                    and thread.ident is not None]
            for thread in dead:  # died between jobs: nothing to fail, only to replace
                self._threads.discard(thread)
            while not self._closed and len(self._threads) < min(len(self._slots),
                                                                self.concurrency):
                self._start_thread()
            deadlines = [s.deadline for s in self._slots.values() if s.deadline is not None]
            self._next_deadline = min(deadlines) if deadlines else None
            self._helping = bool(self.prefetch)
            if len(self._inbox):
                self._help(now)
        wait = HELP_EVERY if self._helping else WATCH_EVERY
        if self._next_deadline is not None:
            wait = min(wait, self._next_deadline - now)
        return max(0.0005, wait)

    def _help(self, now: float) -> None:
        """Jobs wait in the inbox: wake a thread for each job running slow (lock held).

        A buffered hand-over woke only the threads that fast jobs need; if some of those
        jobs turn out slow, the jobs behind them get idle threads here, not only when the
        slow ones end.
        """
        slow = sum(1 for slot in self._slots.values()
                   if slot.thread is not None and now - slot.started >= HANDOVER_TIME)
        if slow:
            self._inbox.wake(slow)

    def _watch_loop(self) -> None:
        while True:
            wait = self.watch()
            with self.lock:
                if self._closed:
                    return
                self._watch_cond.wait(wait)
                if self._closed:
                    return

    def _expire(self, slot: Slot, now: float) -> None:
        self.timed_out += 1
        self.abandoned_threads += 1
        error = JobTimeout(f"timed out after {slot.timeout}s")
        self._free(slot, fail_job(slot.job, error, duration=now - slot.started))
        logger.warning("kathikon: job %s (%s) timed out after %ss; its thread is abandoned "
                       "(%d so far on queue %s)", slot.job.id.hex, slot.job.shown_worker,
                       slot.timeout, self.abandoned_threads, self.queue)

    def _thread_gone(self, slot: Slot, error: BaseException, now: float) -> None:
        self.died += 1
        logger.error("kathikon: the executor thread running job %s (%s) on queue %s died "
                     "(%s); the attempt is failed and the thread replaced", slot.job.id.hex,
                     slot.job.shown_worker, self.queue, error)
        self._free(slot, fail_job(slot.job, error, duration=now - slot.started))

    def _free(self, slot: Slot, execution: Execution) -> None:
        """Abandon ``slot``'s thread, record ``execution`` and free the slot (lock held)."""
        slot.abandoned = True
        del self._slots[id(slot.job)]
        if slot.thread is not None:
            self._threads.discard(slot.thread)
        ended_elsewhere(slot.job, execution)  # tracing on: the attempt's span says so
        self.acker.add(execution)
        self._freed()

    def _freed(self) -> None:
        if self.on_freed is not None:
            self.on_freed()
        self.changed.notify_all()

    def _start_thread(self) -> None:
        thread = new_thread(self._work, name=f"kathikon-{self.queue}-exec")
        self._threads.add(thread)
        thread.start()

    # -- executor threads --------------------------------------------------------------------

    def _work(self) -> None:
        slot: Slot | None = None
        try:
            while True:
                job = self._inbox.get()
                if job is None:
                    return
                slot = self._begin(job)
                if slot is None:
                    continue
                hygiene.close_unusable()  # as at the start of a request
                execution = self.executor.run(job, slot.plan, owns_thread=True)
                with self.lock:
                    if slot.abandoned:
                        return  # timed out or shut down: replaced, the outcome is not ours
                    self.acker.add(execution)  # before the slot frees: shutdown flushes it
                    del self._slots[id(job)]
                    self.finished += 1
                    self.run_time += (self.clock() - slot.started - self.run_time) * 0.1
                    self._freed()
                slot = None
        except BaseException as exc:  # the thread is dying: its job must not stay running
            self._died(slot, exc)
        finally:
            connections.close_all()  # this thread's connections only

    def _died(self, slot: Slot | None, exc: BaseException) -> None:
        me = threading.current_thread()
        try:
            error = ExecutorThreadDied(f"the executor thread died: {type(exc).__module__}."
                                       f"{type(exc).__qualname__}")
            with self.lock:
                self._threads.discard(me)
                if slot is not None and not slot.abandoned:
                    self._thread_gone(slot, error, self.clock())
                if not self._closed:
                    while len(self._threads) < min(len(self._slots), self.concurrency):
                        self._start_thread()
        except BaseException:  # the watchdog finds the slot of a dead thread
            logger.exception("kathikon: cleaning up after a dead executor thread failed")

    def _begin(self, job: Job) -> Slot | None:
        plan = self.executor.plan(job)
        with self.lock:
            slot = self._slots.get(id(job))
            if slot is None:
                return None  # already released by the shutdown
            self._queued -= 1
            if not self._accepting:  # handed over but not started: give it back
                del self._slots[id(job)]
                self.acker.release([Ack(job, JobState.AVAILABLE, restore_attempt=True)])
                self._freed()
                return None
            slot.thread = threading.current_thread()
            slot.plan = plan
            slot.started = self.clock()
            if plan.timeout is not None:
                slot.timeout = plan.timeout
                slot.deadline = slot.started + plan.timeout + (
                    ASYNC_MARGIN if plan.is_async else 0.0)
                if self._next_deadline is None or slot.deadline < self._next_deadline:
                    self._next_deadline = slot.deadline
                    self._watch_cond.notify_all()
            return slot


__all__ = ["ExecutorPool", "Plan", "Slot"]
