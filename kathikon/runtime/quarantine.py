"""Internal: quarantine — crash suspects run one at a time, alone in this worker process.

A job rescued from a process that died is a *suspect* (see ``storage.rescue``).
Ordinary claims skip suspects; this class, stepped by the worker process's main
loop, runs them:

1. Every ``check_every`` seconds it asks whether a suspect of this process's
   queues is due. If one is, every dispatcher stops claiming (``hold``).
2. Once nothing runs in the process and every outcome is written (the acker is
   idle), it claims one suspect and hands it to its queue's dispatcher.
3. While the suspect runs nothing else is claimed; when it has ended and its
   outcome is written, the next suspect is claimed the same way, or, when none
   is due, the dispatchers claim again.

So if the process dies while a suspect runs, that suspect was alone: the
rescue charges the crash to it and to nobody else. A database error here is
logged and the dispatchers resume (it is retried at the next check).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kathikon.models import Job
from kathikon.storage import vendor
from kathikon.storage.quarantine import claim_suspect, suspects_waiting

logger = logging.getLogger("kathikon.runtime")


class Holdable(Protocol):
    """What quarantine needs of a dispatcher."""

    def hold(self, held: bool) -> None: ...

    def adopt(self, job: Job) -> None: ...

    @property
    def quiet(self) -> bool: ...


class Quarantine:
    """Runs this process's crash suspects alone, one at a time (see the module doc)."""

    def __init__(self, node: str, *, check_every: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.node = node
        self.check_every = check_every
        self.clock = clock
        self.job: Job | None = None  # the suspect running now
        self.draining = False        # dispatchers hold while the process empties
        self.ran = 0                 # suspects run so far
        self._next_check = 0.0

    def step(self, dispatchers: Mapping[str, Holdable], acker_idle: bool) -> None:
        """Advance by one tick of the main loop (cheap when there is nothing to do)."""
        try:
            self._step(dispatchers, acker_idle)
        except Exception as exc:
            logger.warning("kathikon: quarantine check failed (%s: %s); claiming normally",
                           type(exc).__name__, exc)
            vendor.reset_connection()
            self.draining = False
            self._hold(dispatchers, False)
            self._next_check = self.clock() + self.check_every

    def _step(self, dispatchers: Mapping[str, Holdable], acker_idle: bool) -> None:
        if self.job is not None:
            if not _empty(dispatchers, acker_idle):
                return  # the suspect still runs, or its outcome is not written yet
            self.job = None  # done: claim the next one below, or resume
        elif not self.draining:
            now = self.clock()
            if now < self._next_check:
                return
            self._next_check = now + self.check_every
            if not suspects_waiting(list(dispatchers)):
                return
            self.draining = True
            self._hold(dispatchers, True)
            logger.info("kathikon worker %s: a crash suspect is due; claiming nothing else "
                        "until the running jobs end", self.node)
        if not _empty(dispatchers, acker_idle):
            return
        job = claim_suspect(list(dispatchers), self.node)
        if job is None:
            self.draining = False
            self._hold(dispatchers, False)
            return
        dispatcher = dispatchers.get(job.queue)
        if dispatcher is None:  # cannot happen: we only claim our own queues
            self.draining = False
            self._hold(dispatchers, False)
            return
        self.job = job
        self.ran += 1
        logger.warning("kathikon worker %s: running crash suspect %s (%s) alone in this "
                       "process", self.node, job.id.hex, job.shown_worker)
        dispatcher.adopt(job)

    @staticmethod
    def _hold(dispatchers: Mapping[str, Any], held: bool) -> None:
        for dispatcher in dispatchers.values():
            dispatcher.hold(held)


def _empty(dispatchers: Mapping[str, Holdable], acker_idle: bool) -> bool:
    """Nothing runs in the process, no claim is in flight and every outcome is written."""
    return acker_idle and all(d.quiet for d in dispatchers.values())
