"""Internal: ``PeriodicService``, the loop under the promoter, pruner, heartbeat and lifeline.

A service does one unit of work in :meth:`PeriodicService.run_once` (deterministic,
callable from tests without a thread) and :meth:`start` repeats it every
``interval`` seconds in a daemon thread until :meth:`stop`. A failing run is
logged, its database connection closed (the next run reconnects) and the next
run backs off exponentially up to ``max_backoff``: a database outage never kills
a service.

Usage::

    class Janitor(PeriodicService):
        name = "janitor"

        def default_interval(self) -> float:
            return 30.0

        def run_once(self) -> int:
            return storage.sweep(self.now())

    janitor = Janitor("host:42")
    janitor.start()
    ...
    janitor.stop(); janitor.join(5)

Services receive their settings through the constructor (defaults from
``kathikon.conf``) and never read ``django.conf.settings`` themselves.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from typing import Any

from django.db import connections

from kathikon.backoff import failure_delay
from kathikon.runtime.threads import start_thread
from kathikon.storage import vendor

logger = logging.getLogger("kathikon.runtime")


class PeriodicService:
    """Run :meth:`run_once` every ``interval`` seconds in a daemon thread.

    Options (keyword arguments of the constructor):

    - ``interval``: seconds between runs (default: :meth:`default_interval`).
    - ``clock``: a callable returning an aware ``datetime`` (default: the
      application clock); tests inject a frozen one.
    - ``max_backoff``: the longest wait after repeated failures (default 30 s,
      never shorter than ``interval``).
    - ``initial_delay``: seconds to wait before the first run (default 0).
    - ``database``: the alias whose connection is reset after a failure
      (default: ``KATHIKON["DATABASE"]``).

    Any other keyword is kept in ``self.options`` for the subclass.
    """

    name = "service"

    def __init__(self, node: str, *, interval: float | None = None,
                 clock: Callable[[], dt.datetime] | None = None, **options: Any) -> None:
        self.node = node
        self.interval = float(self.default_interval() if interval is None else interval)
        self.clock = clock or vendor.now
        self.clock_injected = clock is not None  # False: services may use the database clock
        self.max_backoff = max(float(options.pop("max_backoff", 30.0)), self.interval)
        self.initial_delay = float(options.pop("initial_delay", 0.0))
        self.database = options.pop("database", None) or vendor.alias()
        self.options = options
        self.runs = 0          # completed runs (successful or not)
        self.failures = 0      # consecutive failed runs
        self.last_result: Any = None
        self.last_error: BaseException | None = None
        self._stopping = threading.Event()
        self._wakeup = threading.Event()
        self._ran = threading.Condition()
        self._thread: threading.Thread | None = None

    # -- to override -------------------------------------------------------------------------

    def default_interval(self) -> float:
        return 1.0

    def run_once(self) -> Any:
        """One unit of work; returns something a test can assert on."""
        raise NotImplementedError

    # -- lifecycle ---------------------------------------------------------------------------

    def now(self) -> dt.datetime:
        return self.clock()

    def start(self) -> PeriodicService:
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stopping.clear()
        self._thread = start_thread(self._loop, name=f"kathikon-{self.name}")
        return self

    def stop(self) -> None:
        """Ask the loop to end after the current run (returns at once)."""
        self._stopping.set()
        self._wakeup.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; ``True`` when it has."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def wake(self) -> None:
        """Run again now instead of at the end of the interval."""
        self._wakeup.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def wait_for_runs(self, count: int, timeout: float) -> bool:
        """Block until ``self.runs >= count`` (tests wait on this, never on sleep)."""
        with self._ran:
            return self._ran.wait_for(lambda: self.runs >= count, timeout)

    # -- internals ---------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            if self.initial_delay and self._wait(self.initial_delay):
                return
            while not self._stopping.is_set():
                self._run_guarded()
                if self._wait(self._next_delay()):
                    return
        finally:
            connections.close_all()  # this thread's connections only

    def _run_guarded(self) -> None:
        try:
            self.last_result = self.run_once()
        except Exception as exc:
            self.failures += 1
            self.last_error = exc
            logger.exception("kathikon %s on %s failed (%d in a row); backing off",
                             self.name, self.node, self.failures)
            vendor.reset_connection(self.database)
        else:
            if self.failures:
                logger.info("kathikon %s on %s recovered", self.name, self.node)
            self.failures = 0
        with self._ran:
            self.runs += 1
            self._ran.notify_all()

    def _next_delay(self) -> float:
        if not self.failures:
            return self.interval
        return failure_delay(self.failures, base=max(self.interval, 0.5), cap=self.max_backoff)

    def _wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds`` or until woken; ``True`` when stopping."""
        self._wakeup.wait(seconds)
        self._wakeup.clear()
        return self._stopping.is_set()
