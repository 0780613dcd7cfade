"""Internal: one dispatcher per queue — wake or poll → one claim → the pool → the acker.

The dispatcher thread claims up to its free slots in one statement (straight
into ``running``) and hands each job to an executor thread of the queue's
pool. A thread runs the job, gives the outcome to the process's acker and
frees its slot. When a claim came back full, a freed slot triggers the next
claim (briefly coalesced so one statement claims several jobs); when it came
back short, the dispatcher sleeps until a NOTIFY, a retry coming due, or the
next poll (``POLL_INTERVAL``).

Timeouts: a synchronous ``perform`` cannot be interrupted, so when a job
overruns its worker's ``timeout`` the dispatcher fails the attempt with
``JobTimeout`` (a fenced ack: the job follows its retry policy), frees the
slot and starts a replacement thread. The abandoned thread keeps running
until ``perform`` returns; its late outcome is discarded. Async jobs are
cancelled by ``asyncio.wait_for`` in the process's event loop.
"""

from __future__ import annotations

import logging
import queue as queues
import threading
import time
from dataclasses import dataclass

from django.db import connections

from kathikon.exceptions import KathikonError
from kathikon.executor import JobTimeout, fail_job, is_async_worker, run_job
from kathikon.jobspec import worker_class
from kathikon.models import Job
from kathikon.runtime.acker import Acker, _reset_connection
from kathikon.states import JobState
from kathikon.storage import Ack, claim_jobs
from kathikon.storage.runtime import executing_jobs

logger = logging.getLogger("kathikon.runtime")

COALESCE = 0.002  # seconds a freed slot waits for others before claiming again
ASYNC_MARGIN = 2.0  # async jobs time out in the event loop; this is the fallback


@dataclass(slots=True, eq=False)
class Slot:
    """A claimed job and, once a thread runs it, when it started and must end."""

    job: Job
    started: float = 0.0
    deadline: float | None = None
    timeout: float | None = None
    is_async: bool = False
    abandoned: bool = False


class Dispatcher:
    """Claims jobs of one queue and runs them on a pool of ``concurrency`` threads."""

    def __init__(self, queue: str, concurrency: int, node: str, acker: Acker, *,
                 poll_interval: float = 1.0) -> None:
        self.queue = queue
        self.concurrency = concurrency
        self.node = node
        self.acker = acker
        self.poll_interval = poll_interval
        self.claimed = 0     # jobs claimed since start
        self.finished = 0    # jobs whose run ended (outcome handed to the acker)
        self.timed_out = 0   # jobs failed by the timeout watchdog
        self.abandoned_threads = 0
        self._cond = threading.Condition()
        self._slots: dict[int, Slot] = {}  # keyed by id(job): cheaper than hashing UUIDs
        self._inbox: queues.SimpleQueue[Job | None] = queues.SimpleQueue()
        self._live_threads = 0
        self._woken = True        # claim at start
        self._more = False        # the last claim came back full: more jobs are likely waiting
        self._freed_at: float | None = None
        self._wake_at: float | None = None
        self._next_poll = 0.0
        self._stopping = False
        self._claiming = False    # a claim statement is in flight
        self._suspect_orphans = False
        self._timeouts: dict[str, tuple[float | None, bool]] = {}
        self._thread: threading.Thread | None = None

    # -- control (any thread) ----------------------------------------------------------------

    def start(self) -> Dispatcher:
        self._thread = threading.Thread(target=self._loop, name=f"kathikon-{self.queue}",
                                        daemon=True)
        self._thread.start()
        return self

    def wake(self) -> None:
        """Claim now (a NOTIFY said jobs are available, or the queue was resumed)."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def wake_at(self, when: float) -> None:
        """Claim at monotonic time ``when`` (a retry comes due before the next poll)."""
        with self._cond:
            if self._wake_at is None or when < self._wake_at:
                self._wake_at = when
                self._cond.notify_all()

    def set_concurrency(self, concurrency: int) -> None:
        with self._cond:
            if concurrency != self.concurrency:
                logger.info("kathikon: queue %s concurrency %d → %d", self.queue,
                            self.concurrency, concurrency)
                self.concurrency = concurrency
                self._woken = True
                self._cond.notify_all()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def running(self) -> int:
        with self._cond:
            return len(self._slots)

    @property
    def idle(self) -> bool:
        """Nothing running and the last claim found the queue empty."""
        with self._cond:
            return not (self._slots or self._more or self._woken or self._claiming)

    def stop_claiming(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def wait_running(self, timeout: float) -> bool:
        """Wait until no job runs; ``False`` on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._slots, max(0.0, timeout))

    def abandon_running(self) -> list[Job]:
        """Give up on every job still held (running or not started); their threads' outcomes
        are discarded. Returns the jobs, to be released."""
        with self._cond:
            slots = list(self._slots.values())
            for slot in slots:
                slot.abandoned = True
            self._slots.clear()
            self._cond.notify_all()
        return [slot.job for slot in slots]

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the dispatcher thread to end (after :meth:`stop_claiming`)."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def close(self) -> None:
        """Let the idle executor threads end (after :meth:`abandon_running`)."""
        with self._cond:
            threads = self._live_threads
        for _ in range(threads):
            self._inbox.put(None)

    # -- the dispatcher thread ---------------------------------------------------------------

    def _loop(self) -> None:
        failures = 0
        try:
            while True:
                free = self._wait_for_claim()
                if free is None:
                    return
                try:
                    if self._suspect_orphans:
                        self._recover_orphans()
                    jobs = claim_jobs(self.queue, free, self.node)
                except Exception as exc:
                    failures += 1
                    with self._cond:
                        self._claiming = False
                    self._suspect_orphans = True  # the claim may have committed unseen
                    delay = min(0.1 * 2 ** min(failures, 8), 10.0)
                    logger.warning("kathikon: claim on queue %s failed (%s: %s); retrying in "
                                   "%.1fs", self.queue, type(exc).__name__, exc, delay)
                    _reset_connection()
                    self._pause(delay)
                    continue
                if failures:
                    logger.info("kathikon: queue %s claims again after %d failure(s)",
                                self.queue, failures)
                    failures = 0
                self._dispatch(jobs, free)
        except BaseException:
            logger.exception("kathikon: dispatcher of queue %s crashed", self.queue)
            raise
        finally:
            connections.close_all()  # this thread's connections only

    def _wait_for_claim(self) -> int | None:
        """Block until a claim is due; the number of free slots, or None when stopping."""
        with self._cond:
            while not self._stopping:
                now = time.monotonic()
                self._expire(now)
                free = self.concurrency - len(self._slots)
                timeout = self.poll_interval
                if free > 0:
                    timeout = self._next_poll - now
                    due = self._woken or now >= self._next_poll or (
                        self._wake_at is not None and now >= self._wake_at)
                    if due:
                        wait = self._coalesce(now, free)
                        if wait <= 0:
                            self._claiming = True
                            self._woken = False
                            self._freed_at = None
                            if self._wake_at is not None and now >= self._wake_at:
                                self._wake_at = None
                            return free
                        timeout = wait
                    elif self._wake_at is not None:
                        timeout = min(timeout, self._wake_at - now)
                deadlines = [s.deadline for s in self._slots.values() if s.deadline is not None]
                if deadlines:
                    timeout = min(timeout, min(deadlines) - now)
                self._cond.wait(max(0.0005, min(timeout, self.poll_interval)))
            return None

    def _coalesce(self, now: float, free: int) -> float:
        """Seconds to wait for more slots to free before claiming (0: claim now)."""
        if not self._slots or free >= max(1, self.concurrency // 2) or self._freed_at is None:
            return 0.0
        return self._freed_at + COALESCE - now

    def _pause(self, seconds: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._stopping, seconds)

    def _dispatch(self, jobs: list[Job], requested: int) -> None:
        with self._cond:
            self._claiming = False
            self._more = len(jobs) >= requested
            self._next_poll = time.monotonic() + self.poll_interval
            for job in jobs:
                self._slots[id(job)] = Slot(job)
            self.claimed += len(jobs)
            while self._live_threads < len(self._slots):
                self._start_thread()
        for job in jobs:
            self._inbox.put(job)

    def _start_thread(self) -> None:
        self._live_threads += 1
        thread = threading.Thread(target=self._work, name=f"kathikon-{self.queue}-exec",
                                  daemon=True)
        thread.start()

    def _expire(self, now: float) -> None:
        """Fail jobs past their deadline, free their slots and replace their threads."""
        for slot in [s for s in self._slots.values()
                     if s.deadline is not None and now >= s.deadline]:
            slot.abandoned = True
            del self._slots[id(slot.job)]
            self._live_threads -= 1
            self.timed_out += 1
            self.abandoned_threads += 1
            error = JobTimeout(f"timed out after {slot.timeout}s")
            self.acker.add(fail_job(slot.job, error, duration=now - slot.started))
            logger.warning("kathikon: job %s (%s) timed out after %ss; its thread is abandoned "
                           "(%d so far on queue %s)", slot.job.id.hex, slot.job.worker,
                           slot.timeout, self.abandoned_threads, self.queue)
            self._freed()
            self._start_thread()

    def _freed(self) -> None:
        if self._more:
            self._woken = True
            if self._freed_at is None:
                self._freed_at = time.monotonic()
            self._cond.notify_all()
        elif not self._slots:
            self._cond.notify_all()

    def _recover_orphans(self) -> None:
        """Release jobs a failed claim committed but never returned (they would be stuck)."""
        rows = executing_jobs(self.node, self.queue)
        with self._cond:
            known = {slot.job.id for slot in self._slots.values()}
        known |= self.acker.pending_ids()
        orphans = [job for job in rows if job.id not in known]
        if orphans:
            logger.warning("kathikon: releasing %d job(s) of queue %s claimed by a lost "
                           "statement", len(orphans), self.queue)
            self.acker.release([Ack(job, JobState.AVAILABLE, restore_attempt=True)
                                for job in orphans])
        self._suspect_orphans = False

    # -- executor threads --------------------------------------------------------------------

    def _work(self) -> None:
        try:
            while True:
                job = self._inbox.get()
                if job is None:
                    return
                slot = self._begin(job)
                if slot is None:
                    continue
                _close_unusable_connections()  # as at the start of a request
                try:
                    execution = run_job(job)
                except BaseException as exc:  # SystemExit from perform, or a bug: not a thread
                    logger.exception("kathikon: running job %s escaped the executor", job.id.hex)
                    error = exc if isinstance(exc, Exception) else RuntimeError(repr(exc))
                    execution = fail_job(job, error, duration=time.monotonic() - slot.started)
                with self._cond:
                    if slot.abandoned:
                        return  # timed out or shut down: replaced, the outcome is not ours
                    self.acker.add(execution)  # before the slot frees: shutdown flushes it
                    del self._slots[id(job)]
                    self.finished += 1
                    self._freed()
                _close_unusable_connections()  # as at the end of a request
        finally:
            connections.close_all()  # this thread's connections only

    def _begin(self, job: Job) -> Slot | None:
        timeout, is_async = self._timeout_of(job)
        with self._cond:
            slot = self._slots.get(id(job))
            if slot is None:
                return None  # already released by the shutdown
            if self._stopping:  # claimed but not started: give it back
                del self._slots[id(job)]
                self.acker.release([Ack(job, JobState.AVAILABLE, restore_attempt=True)])
                self._freed()
                return None
            slot.started = time.monotonic()
            slot.is_async = is_async
            if timeout is not None:
                slot.timeout = timeout
                slot.deadline = slot.started + timeout + (ASYNC_MARGIN if is_async else 0.0)
                self._cond.notify_all()  # the dispatcher now has a deadline to watch
            return slot

    def _timeout_of(self, job: Job) -> tuple[float | None, bool]:
        cached = self._timeouts.get(job.worker)
        if cached is None:
            try:
                _, cls = worker_class(job.worker)
                cached = (cls.timeout, is_async_worker(cls))
            except KathikonError:
                cached = (None, False)  # run_job records the unknown worker
            self._timeouts[job.worker] = cached
        return cached


def _close_unusable_connections() -> None:
    """What Django's request cycle does, for connections this job opened (usually none)."""
    for connection in connections.all(initialized_only=True):
        connection.close_if_unusable_or_obsolete()
