"""Internal: one dispatcher per queue — the claim loop: wake or poll → one claim → the pool.

The dispatcher thread claims as many jobs as the queue's
:class:`~kathikon.runtime.pool.ExecutorPool` takes, in one statement (straight
into ``running``), and hands them over; the pool runs them, hands the outcomes
to the process's acker and frees their slots. When a claim came back full, a
freed slot triggers the next claim (briefly coalesced so one statement claims
several jobs); when it came back short, the dispatcher sleeps until a NOTIFY,
a retry coming due, or the next poll (``POLL_INTERVAL``). A failed claim is
retried with backoff, after releasing whatever it may have committed unseen.

Adaptive batches: while claims come back full (a backlog) and the queue's jobs
are fast, each claim also refills the pool's local buffer, doubling it up to
``BUFFER_PER_SLOT`` jobs per executor thread (``BUFFER_MAX`` at most): one
statement then claims hundreds of jobs instead of the few slots that just
freed. A short claim (the backlog is gone) or slow jobs (``FAST_JOB``) shrink
it back to nothing, so an idle or a slow queue claims only what it runs and
never hoards jobs other nodes could run.

Claims in a row: while the buffer is on, a claim takes at most half of what the
pool holds, so the next one fits beside it. When a claim leaves a third of the
pool free, the dispatcher begins the next one before it lets go of the lock
and sends it as soon as the threads have their jobs: the threads run one claim
while the database makes the next. (Waiting on the lock for a freed slot
instead would leave the threads idle for a whole statement, and the
dispatcher, one thread among busy executors, often gets the GIL back only
after they have run the whole buffer.)

A queue with flow limits (``kathikon.limits``) claims through
``storage.limited`` instead; while a limit holds it back it claims again as soon
as an ack frees capacity on this node, else every ``HELD_POLL`` seconds, and it
sends ``queue_limited`` at most once a second.

The loop is a small state machine on an injectable ``clock``: :meth:`Dispatcher.step`
makes one claim when one is due, so tests drive it without threads or sleeps.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import connections

from kathikon import signals
from kathikon.backoff import failure_delay
from kathikon.executor import Executor
from kathikon.limits import Limits
from kathikon.models import Job, Queue
from kathikon.runtime.acker import Acker
from kathikon.runtime.pool import ExecutorPool
from kathikon.runtime.threads import start_thread
from kathikon.states import JobState
from kathikon.storage import Ack, claim_jobs, vendor
from kathikon.storage.limited import claim_limited_jobs
from kathikon.storage.runtime import executing_jobs

logger = logging.getLogger("kathikon.runtime")

COALESCE = 0.002  # seconds a freed slot waits for others before claiming again
BUFFER_PER_SLOT = 40  # the local buffer holds up to this many jobs per executor thread ...
BUFFER_MAX = 400      # ... and never more than this (a claim then costs the database
# ~40 µs of CPU per job instead of ~80 at 4 per thread: planning and commit are per statement)
FAST_JOB = 0.005     # seconds: jobs that run longer than this on average are not buffered
HELD_POLL = 0.05  # seconds between claims while a limit holds a queue back (capacity may free
# on another node: nothing wakes this one)
LIMITED_SIGNAL_EVERY = 1.0  # queue_limited is sent at most this often per queue

Claim = Callable[[str, int, str], list[Job]]


class Dispatcher:
    """Claims jobs of one queue for its pool of ``concurrency`` executor threads."""

    def __init__(self, queue: str, concurrency: int, node: str, acker: Acker, *,
                 poll_interval: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 claim: Claim = claim_jobs, pool: ExecutorPool | None = None,
                 executor: Executor | None = None) -> None:
        self.queue = queue
        self.node = node
        self.acker = acker
        self.poll_interval = poll_interval
        self.clock = clock
        self.claim = claim
        self.pool = pool or ExecutorPool(queue, concurrency, acker, clock=clock,
                                         executor=executor)
        self.pool.on_freed = self._freed
        self.claimed = 0     # jobs claimed since start
        self.failures = 0    # consecutive failed claims
        self._cond = self.pool.changed  # one lock for the pool's slots and this state
        self._woken = True        # claim at start
        self._more = False        # the last claim came back full: more jobs are likely waiting
        self._freed_at: float | None = None
        self._wake_at: float | None = None
        self._next_poll = 0.0
        self._hold_until = 0.0    # after a failed claim: not before this
        self._stopping = False
        self._claiming = False    # a claim statement is in flight
        self._chained: int | None = None  # the limit of a claim the last one began
        self._suspect_orphans = False
        self._quarantined = False  # claim nothing: a crash suspect runs alone (quarantine.py)
        self._thread: threading.Thread | None = None
        self.limits = Limits()    # global/partition/rate limits: claimed through storage.limited
        self.held_claims = 0      # claims a limit held short since start
        self.held = False         # the last claim was held short by a limit
        self._held: dict[str, int] = {}  # limit → held claims not yet signalled
        self._held_since = 0.0

    # -- control (any thread) ----------------------------------------------------------------

    def start(self) -> Dispatcher:
        self._thread = start_thread(self._loop, name=f"kathikon-{self.queue}")
        return self

    def wake(self) -> None:
        """Claim now (a NOTIFY said jobs are available, or the queue was resumed)."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def wake_at(self, when: float) -> None:
        """Claim at ``when`` on the dispatcher's clock (a retry comes due before the next poll)."""
        with self._cond:
            if self._wake_at is None or when < self._wake_at:
                self._wake_at = when
                self._cond.notify_all()

    @property
    def concurrency(self) -> int:
        return self.pool.concurrency

    def set_concurrency(self, concurrency: int) -> None:
        with self._cond:
            if concurrency != self.pool.concurrency:
                logger.info("kathikon: queue %s concurrency %d → %d", self.queue,
                            self.pool.concurrency, concurrency)
                self.pool.concurrency = concurrency
                self._woken = True
                self._cond.notify_all()

    def wake_if_held(self) -> None:
        """Claim now if a limit held the last claim back (an ack just freed capacity)."""
        with self._cond:
            if self.held:
                self._woken = True
                self._cond.notify_all()

    def set_limits(self, limits: Limits) -> None:
        with self._cond:
            if limits != self.limits:
                logger.info("kathikon: queue %s limits %s", self.queue, limits.as_options())
                self.limits = limits
                self.pool.prefetch = 0  # a new limit may be lower than what is buffered
                self._woken = True
                self._cond.notify_all()

    def hold(self, held: bool) -> None:
        """Stop (or resume) claiming while a crash suspect waits to run alone."""
        with self._cond:
            if self._quarantined and not held:
                self._woken = True
            self._quarantined = held
            self._cond.notify_all()

    def adopt(self, job: Job) -> None:
        """Run ``job``, claimed by the quarantine, on this queue's pool."""
        with self._cond:
            self.claimed += 1
        self.pool.submit([job])

    @property
    def quiet(self) -> bool:
        """Nothing held by this dispatcher: no job in its pool and no claim in flight."""
        with self._cond:
            return not (self.pool.holding() or self._claiming)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def running(self) -> int:
        return self.pool.held

    @property
    def idle(self) -> bool:
        """Nothing running and the last claim found the queue empty."""
        with self._cond:
            return not (self.pool.holding() or self._more or self._woken or self._claiming)

    def stop_claiming(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self.pool.stop_accepting()

    def wait_running(self, timeout: float) -> bool:
        """Wait until no job runs; ``False`` on timeout."""
        return self.pool.wait_running(timeout)

    def abandon_running(self) -> list[Job]:
        """Give up on every job still held; returns them, to be released."""
        return self.pool.abandon_running()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the dispatcher thread to end (after :meth:`stop_claiming`)."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def close(self) -> None:
        """Let the pool's threads end (after :meth:`abandon_running`)."""
        self.pool.close()

    # -- the claim loop ----------------------------------------------------------------------

    def step(self) -> int | None:
        """Make one claim if one is due now: the number of jobs claimed, else ``None``."""
        with self._cond:
            limit = self._take_chained()
            if limit is None:
                if self._stopping or self._due_in(self.clock()) > 0:
                    return None
                limit = self._begin_claim(self.clock())
        return self._claim(limit)

    def due_in(self) -> float:
        """Seconds until the next claim is due (0: now); for tests and the loop."""
        with self._cond:
            return self._due_in(self.clock())

    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    limit = self._take_chained()
                    while limit is None:
                        if self._stopping:
                            return
                        now = self.clock()
                        wait = self._due_in(now)
                        if wait <= 0:
                            limit = self._begin_claim(now)
                            break
                        self._cond.wait(max(0.0005, min(wait, self.poll_interval)))
                self._claim(limit)
        except BaseException:
            logger.exception("kathikon: dispatcher of queue %s crashed", self.queue)
            raise
        finally:
            connections.close_all()  # this thread's connections only

    def _take_chained(self) -> int | None:
        """The limit of the claim the last one began (lock held), unless the dispatcher
        has since been told to stop or to hold (a crash suspect runs alone)."""
        limit, self._chained = self._chained, None
        if limit is not None and (self._stopping or self._quarantined):
            self._claiming = False
            return None
        return limit

    def _due_in(self, now: float) -> float:
        """Seconds until a claim is due (lock held); 0 or less: claim now."""
        free = self.pool.capacity()
        if free <= 0 or self._quarantined:
            return self.poll_interval  # a freed slot (or the end of a hold) notifies
        if (self.pool.prefetch and self.pool.queued()
                and free * 3 < self.pool.concurrency + self.pool.prefetch):
            return self.poll_interval  # the buffer still feeds the threads; a freed slot notifies
        if now < self._hold_until:
            return self._hold_until - now
        due = self._woken or now >= self._next_poll or (
            self._wake_at is not None and now >= self._wake_at)
        if due:
            return self._coalesce(now, free)
        wait = self._next_poll - now
        if self._wake_at is not None:
            wait = min(wait, self._wake_at - now)
        return wait

    def _begin_claim(self, now: float) -> int:
        self._claiming = True
        self._woken = False
        self._freed_at = None
        if self._wake_at is not None and now >= self._wake_at:
            self._wake_at = None
        free = self.pool.capacity()
        if self.pool.prefetch:  # half the pool at most: the next claim fits beside this one
            return min(free, (self.pool.concurrency + self.pool.prefetch) // 2)
        return free

    def _coalesce(self, now: float, free: int) -> float:
        """Seconds to wait for more slots to free before claiming (0: claim now)."""
        total = self.pool.concurrency + self.pool.prefetch
        if free >= max(1, total // 2) or self._freed_at is None:
            return 0.0
        return self._freed_at + COALESCE - now

    def _adapt(self, full: bool) -> None:
        """Grow the local buffer while claims come back full with fast jobs; else drop it."""
        pool = self.pool
        if full and pool.finished and pool.run_time < FAST_JOB:
            most = min(BUFFER_MAX, BUFFER_PER_SLOT * pool.concurrency)
            pool.prefetch = min(most, max(pool.concurrency, pool.prefetch * 2))
        else:
            pool.prefetch = 0

    def _claim(self, limit: int) -> int:
        try:
            if self._suspect_orphans:
                self._recover_orphans()
            held_by = None
            if self.limits:
                claimed = claim_limited_jobs(self.queue, limit, self.node, self.limits)
                jobs, held_by = claimed.jobs, claimed.held_by
            else:
                jobs = self.claim(self.queue, limit, self.node)
        except Exception as exc:
            self.failures += 1
            delay = failure_delay(self.failures, base=0.1, cap=10.0)
            with self._cond:
                self._claiming = False
                self._woken = True  # claim again once the delay is over
                self._hold_until = self.clock() + delay
            self._suspect_orphans = True  # the claim may have committed unseen
            logger.warning("kathikon: claim on queue %s failed (%s: %s); retrying in %.1fs",
                           self.queue, type(exc).__name__, exc, delay)
            vendor.reset_connection()
            return 0
        if self.failures:
            logger.info("kathikon: queue %s claims again after %d failure(s)", self.queue,
                        self.failures)
            self.failures = 0
        if held_by is not None:
            self._note_held(held_by)
        with self._cond:
            self._claiming = False
            self._more = len(jobs) >= limit or held_by is not None  # held: capacity frees
            self.held = held_by is not None
            # A limited queue buffers too: buffered jobs are claimed, so they count against
            # its limits; a claim a limit holds short comes back short and drops the buffer.
            self._adapt(len(jobs) >= limit)
            self._next_poll = self.clock() + (
                min(self.poll_interval, HELD_POLL) if held_by else self.poll_interval)
            self.claimed += len(jobs)
            self.pool.take(jobs)  # with the claim's end: never idle in between
            if self.pool.prefetch and len(jobs) >= limit and not self._stopping:
                self._woken = True  # more are waiting: claim again as soon as there is room
                now = self.clock()
                if self._due_in(now) <= 0:
                    self._chained = self._begin_claim(now)
        self.pool.run(jobs)
        return len(jobs)

    def _note_held(self, limit: str) -> None:
        """Count a claim a limit held short; signal the counts at most once a second."""
        now = self.clock()
        self.held_claims += 1
        if not self._held:
            self._held_since = now
        self._held[limit] = self._held.get(limit, 0) + 1
        if now - self._held_since >= LIMITED_SIGNAL_EVERY or self.held_claims == 1:
            held, self._held = self._held, {}
            for name, count in held.items():
                signals.send(signals.queue_limited, Queue, queue=self.queue, node=self.node,
                             limit=name, claims=count, since=now - self._held_since)

    def _freed(self) -> None:
        """A slot freed (called by the pool, lock held): claim again if more jobs wait."""
        if self._more:
            self._woken = True
            if self._freed_at is None:
                self._freed_at = self.clock()

    def _recover_orphans(self) -> None:
        """Release jobs a failed claim committed but never returned (they would be stuck)."""
        rows = executing_jobs(self.node, self.queue)
        known = self.pool.held_ids() | self.acker.pending_ids()
        orphans = [job for job in rows if job.id not in known]
        if orphans:
            logger.warning("kathikon: releasing %d job(s) of queue %s claimed by a lost "
                           "statement", len(orphans), self.queue)
            self.acker.release([Ack(job, JobState.AVAILABLE, restore_attempt=True)
                                for job in orphans])
        self._suspect_orphans = False
