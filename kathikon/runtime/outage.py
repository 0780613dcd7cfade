"""Internal: a database outage said once — when it starts, and when it ends.

While a worker's database is down every part of the process fails in turn: each
poll of each dispatcher, the queue refresh, the quarantine check, the services,
the listener. Each retries on its own; logged as they happen that is a screen of
the same error every poll. The worker's main loop decides whether the database
is down (its queue refresh is the probe) and tells an :class:`Outage`: one
warning when the outage begins, one line when the database is back. Meanwhile
:class:`QuietDuringOutage`, a logging filter the worker installs on Kathikon's
loggers for its lifetime, drops the other parts' database-error records.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import DatabaseError, InterfaceError

logger = logging.getLogger("kathikon.runtime")
QUIETED = ("kathikon", "kathikon.runtime")  # the loggers whose records the filter sees
OWN = "kathikon_outage"  # marks the outage's own two lines, which the filter lets through


class Outage:
    """Whether this process's database is down, said once each way."""

    def __init__(self, node: str, database: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.node, self.database, self.clock = node, database, clock
        self._since: float | None = None
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        return self._since is not None

    def failed(self, what: str, exc: BaseException) -> None:
        """A probe failed; the first failure of an outage is logged (a WARNING)."""
        with self._lock:
            if self._since is not None:
                return
            self._since = self.clock()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        logger.warning("kathikon worker %s: database %r unavailable (%s: %s: %s); its queues "
                       "wait while every part of this worker keeps retrying; said again when "
                       "it is back",
                       self.node, self.database, what, type(exc).__name__, first,
                       extra={OWN: True})

    def recovered(self) -> None:
        """A probe succeeded: the end of an outage is logged."""
        with self._lock:
            since, self._since = self._since, None
        if since is not None:
            logger.warning("kathikon worker %s: database %r is back after %.1fs",
                           self.node, self.database, self.clock() - since, extra={OWN: True})


class QuietDuringOutage(logging.Filter):
    """Drops WARNING-and-above records about a database error while ``outage`` is active."""

    def __init__(self, outage: Outage) -> None:
        super().__init__()
        self.outage = outage

    def filter(self, record: logging.LogRecord) -> bool:
        if (not self.outage.active or record.levelno < logging.WARNING
                or getattr(record, OWN, False)):
            return True
        return not is_database_error(record)


def is_database_error(record: logging.LogRecord) -> bool:
    """The record reports a failed database call: its exception, or one of its arguments."""
    error = record.exc_info[1] if record.exc_info else None
    candidates = [error, *(record.args if isinstance(record.args, tuple) else ())]
    return any(isinstance(value, (DatabaseError, InterfaceError))
               or (isinstance(value, BaseException) and type(value).__name__ in _ERROR_NAMES)
               or (isinstance(value, str) and value in _ERROR_NAMES) for value in candidates)


# Django's and the drivers' connection errors by name (messages pass ``type(exc).__name__``).
_ERROR_NAMES = frozenset({"OperationalError", "InterfaceError", "DatabaseError"})


@contextmanager
def quiet_during(outage: Outage) -> Iterator[None]:
    """Install :class:`QuietDuringOutage` on Kathikon's loggers for the block."""
    quiet = QuietDuringOutage(outage)
    loggers = [logging.getLogger(name) for name in QUIETED]
    for each in loggers:
        each.addFilter(quiet)
    try:
        yield
    finally:
        for each in loggers:
            each.removeFilter(quiet)
