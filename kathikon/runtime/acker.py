"""Internal: the acker — the "ack" of claim → run → ack, batched for a whole process.

Executor threads hand every finished :class:`~kathikon.executor.Execution` to
the acker and move on; the acker's thread writes whatever has accumulated
with one :func:`~kathikon.executor.settle` call (one fenced ``UPDATE`` for all
completions on PostgreSQL). While a write is in flight the next batch
collects, so batches grow with the load and an idle worker acks at once.

Only what can heal is retried (kathikon.storage.errors): a lost connection,
a serialization failure, a deadlock, "database is locked" — with backoff,
until written or fenced off. A permanent error never holds up the batch: its
jobs are written one by one, and the outcome of a job the database refuses
for good becomes a failed attempt of kind ``kathikon.UnstorableOutcome``
(retried by its worker's policy), except a completion whose result is refused:
it is written again as completed, its result replaced by the marker of
kathikon.storable (``perform``'s work is done; a retry would only repeat it).
A write that raises writes nothing, so a retry changes nothing twice; signals
and batch callbacks follow the write.

If the process dies before a flush, those jobs are still ``running`` under
this node and the lifeline rescues them: they run again, they are never lost.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from typing import TypeVar

from django.db import connections

from kathikon.backoff import failure_delay
from kathikon.executor import Execution, announce, record, result_refused, unstorable
from kathikon.runtime.threads import start_thread
from kathikon.storage import Ack, Acked, ack_jobs, is_transient, vendor

logger = logging.getLogger("kathikon.runtime")

MAX_BATCH = 2000

T = TypeVar("T")


class Acker:
    """Collect executions and releases from any thread; write them in batches on one thread.

    ``on_settled(executions)`` is called (on the acker thread) after each
    batch is written, with the executions of that batch.
    """

    def __init__(self, *, on_settled: Callable[[list[Execution]], None] | None = None,
                 max_backoff: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.on_settled = on_settled
        self.max_backoff = max_backoff
        self.clock = clock
        self._progress_at = clock()  # the last write, or when work arrived at an idle acker
        self.written = 0  # executions written (not fenced off)
        self.fenced = 0   # executions whose ack matched no row
        self.failures = 0  # failed write attempts
        self.unstorable = 0  # outcomes the database refused, recorded as failed attempts
        self._executions: list[Execution] = []
        self._releases: list[Ack] = []
        self._in_flight: tuple[list[Execution], list[Ack]] = ([], [])
        self._lock = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    # -- called from any thread --------------------------------------------------------------

    def add(self, execution: Execution) -> None:
        with self._lock:
            if not (self._executions or self._releases or self._busy):
                self._progress_at = self.clock()
            self._executions.append(execution)
            self._lock.notify_all()

    def release(self, acks: Sequence[Ack]) -> None:
        """Queue fenced releases (back to ``available``); no signals are sent for these."""
        if acks:
            with self._lock:
                if not (self._executions or self._releases or self._busy):
                    self._progress_at = self.clock()
                self._releases.extend(acks)
                self._lock.notify_all()

    def stalled_for(self) -> float:
        """Seconds the acker has had work without writing anything (0 when idle).

        Liveness is progress, not a live thread: a write blocked on a lock or
        retried forever leaves the thread alive but every later ack behind it.
        """
        with self._lock:
            if not (self._executions or self._releases or self._busy):
                return 0.0
            return max(0.0, self.clock() - self._progress_at)

    def pending_ids(self) -> set[uuid.UUID]:
        """Ids of jobs whose outcome is not written yet (queued or being written)."""
        with self._lock:
            executions = [*self._executions, *self._in_flight[0]]
            releases = [*self._releases, *self._in_flight[1]]
        return {e.job.id for e in executions} | {a.job.id for a in releases}

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def idle(self) -> bool:
        with self._lock:
            return not (self._executions or self._releases or self._busy)

    @property
    def _busy(self) -> bool:
        return bool(self._in_flight[0] or self._in_flight[1])

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything handed over so far is written; ``False`` on timeout."""
        with self._lock:
            return self._lock.wait_for(
                lambda: not (self._executions or self._releases or self._busy), timeout)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Acker:
        self._thread = start_thread(self._loop, name="kathikon-acker")
        return self

    def stop(self, timeout: float | None = None) -> bool:
        """Write what is pending, then end the thread; ``True`` when everything was written."""
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive() and self.idle
        return self.idle

    # -- the acker thread --------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while True:
                with self._lock:
                    self._lock.wait_for(
                        lambda: self._executions or self._releases or self._stopping)
                    if not (self._executions or self._releases):
                        return  # stopping with nothing left to write
                    executions = self._executions[:MAX_BATCH]
                    del self._executions[:MAX_BATCH]
                    releases, self._releases = self._releases, []
                    self._in_flight = (executions, releases)
                self._write(executions, releases)
                with self._lock:
                    self._in_flight = ([], [])
                    self._progress_at = self.clock()
                    self._lock.notify_all()
        finally:
            connections.close_all()  # this thread's connections only

    def _write(self, executions: list[Execution], releases: list[Ack]) -> None:
        if releases:
            try:
                self._retrying(lambda: ack_jobs(releases), f"release of {len(releases)} job(s)")
            except Exception:  # nothing of the user's in a release: a bug, not a job's fault
                logger.exception("kathikon: releasing %d job(s) failed for good; the lifeline "
                                 "rescues them once this node stops", len(releases))
        if not executions:
            return
        acked = self._record(executions)
        for execution in executions:
            if execution.written:
                self.written += 1
            else:
                self.fenced += 1
        try:
            announce(executions, acked)
        except Exception:  # signals and callbacks must never stop acknowledgements
            logger.exception("kathikon: sending the signals of %d outcome(s) failed",
                             len(executions))
        if self.on_settled is not None:
            try:
                self.on_settled(executions)
            except Exception:  # a bookkeeping hook must never stop acknowledgements
                logger.exception("kathikon: acker callback failed")

    def _record(self, executions: list[Execution]) -> Acked:
        """Write the batch; after a permanent error, job by job (replacing what is refused)."""
        try:
            return self._retrying(lambda: record(executions),
                                  f"ack of {len(executions)} job(s)")
        except Exception as exc:
            if len(executions) == 1:
                return self._replace(executions, 0, exc)
            logger.warning("kathikon: ack of %d jobs failed for good (%s: %s); writing them "
                           "one by one", len(executions), type(exc).__name__, exc)
        total = Acked()
        for index, execution in enumerate(executions):
            try:
                acked = self._retrying(partial(record, [execution]),
                                       f"ack of job {execution.job.id.hex}")
            except Exception as exc:
                acked = self._replace(executions, index, exc)
            total.written |= acked.written
            total.held |= acked.held
            total.finished_batches |= acked.finished_batches
        return total

    def _replace(self, executions: list[Execution], index: int, exc: Exception) -> Acked:
        """The database refuses this outcome for good: record what still can be.

        A completion whose result is refused stays a completion (``perform``'s work is
        done), with the marker of kathikon.storable as its result; any other outcome, or
        a completion refused even so, becomes a failed attempt.
        """
        execution = executions[index]
        self.unstorable += 1
        replacements: list[Callable[[Execution, BaseException], Execution]] = [
            partial(unstorable, detail=True),
            partial(unstorable, detail=False),  # without the database's words: a last resort
        ]
        if execution.kind == "completed" and execution.ack.result is not None:
            replacements.insert(0, result_refused)
        last: Exception = exc
        for replace in replacements:
            replacement = replace(execution, exc)
            try:
                acked = self._retrying(partial(record, [replacement]),
                                       f"{replacement.kind} outcome of job {execution.job.id.hex}")
            except Exception as again:
                last = again
                continue
            recorded = ("as completed without its result (kathikon.storable.UNSTORED)"
                        if replacement.kind == "completed"
                        else "the attempt as failed (kathikon.UnstorableOutcome)")
            logger.error("kathikon: the %s outcome of job %s (%s) cannot be stored (%s: %s); "
                         "recorded %s", execution.kind, execution.job.id.hex,
                         execution.job.worker, type(exc).__name__, str(exc)[:500], recorded)
            executions[index] = replacement
            return acked
        logger.error("kathikon: not even the failure of job %s can be stored (%s: %s); it "
                     "stays running until this node stops and the lifeline rescues it",
                     execution.job.id.hex, type(last).__name__, str(last)[:500])
        return Acked()

    def _retrying(self, write: Callable[[], T], what: str) -> T:
        """Run ``write`` until it succeeds, retrying errors that heal; others are raised."""
        failures = 0
        while True:
            try:
                return write()
            except Exception as exc:
                failures += 1
                self.failures += 1
                vendor.reset_connection()
                if not is_transient(exc):
                    raise
                delay = failure_delay(failures, base=0.05, cap=self.max_backoff)
                logger.warning("kathikon: %s failed (%s: %s); retrying in %.2fs", what,
                               type(exc).__name__, str(exc)[:500], delay)
                time.sleep(delay)

