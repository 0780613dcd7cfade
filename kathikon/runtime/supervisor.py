"""Internal: the supervisor — ``--processes N`` forks N worker processes and keeps them up.

With one process the supervisor simply runs the worker in-process. With more
it forks (POSIX) each child from a process with no open database connection
and no threads; a child that dies unexpectedly is restarted after a short
backoff; SIGTERM/SIGINT are forwarded once to every child and the supervisor
waits for them (each applies its own grace period). A child notices a
vanished supervisor and shuts down gracefully. Exit code: 0 when every child
exited 0.

The restart delay grows with each quick crash of a child (1, 2, 5, 10, 30 s) and
starts again at 1 s once a child has run ``HEALTHY_RUN`` seconds: a child that
crashes now and then (a poison pill, see the crash budget in
docs/reliability.md) is back within a second, not after 30. A child that exits
with ``EXIT_NODE_IN_USE`` (78, EX_CONFIG: its node name belongs to another live
process, or the database lacks Kathikon's tables) is not restarted: it would
only be refused again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from django.db import connections

from kathikon.exceptions import NotMigrated

logger = logging.getLogger("kathikon.runtime")

RESTART_BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0)
HEALTHY_RUN = 10.0  # seconds a child must run for its next crash to restart after 1 s again
EXIT_NODE_IN_USE = 78  # sysexits EX_CONFIG (as NotMigrated): as configured, it cannot run


class Supervisor:
    """Run ``make_worker(index, parent_pid)().run()`` in ``processes`` processes.

    ``make_worker`` builds a :class:`~kathikon.runtime.worker.WorkerProcess`
    for child ``index`` (node names must differ between children);
    ``parent_pid`` is ``None`` when the worker runs in this process.
    """

    def __init__(self, processes: int, make_worker: Callable[[int, int | None], Any], *,
                 burst: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.processes = max(1, processes)
        self.make_worker = make_worker
        self.burst = burst
        self.children: dict[int, int] = {}  # pid → index
        self.restarts: dict[int, int] = {}  # index → quick restarts in a row
        self.clock = clock
        self.spawned_at: dict[int, float] = {}  # index → when its current child started
        self._stopping = False
        self._exit_code = 0

    def run(self) -> int:
        if self.processes == 1:
            return int(self.make_worker(0, None).run())
        if not hasattr(os, "fork"):
            raise OSError("--processes needs os.fork (POSIX); start several workers instead")
        connections.close_all()  # a forked child must not share the parent's sockets
        signal.signal(signal.SIGTERM, self._forward)
        signal.signal(signal.SIGINT, self._forward)
        for index in range(self.processes):
            self._spawn(index)
        while self.children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries os.wait
                continue
            if pid not in self.children:
                continue
            index = self.children.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            self._reaped(index, pid, code)
        return self._exit_code

    # -- internals ---------------------------------------------------------------------------

    def _spawn(self, index: int) -> None:
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: never return into the supervisor's code
            code = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                code = int(self.make_worker(index, parent).run())
            except BaseException:
                logger.exception("kathikon worker process %d crashed", os.getpid())
            finally:
                logging.shutdown()
                os._exit(code)
        self.children[pid] = index
        self.spawned_at[index] = self.clock()
        logger.info("kathikon supervisor %d: started worker %d (pid %d)", parent, index, pid)

    def _reaped(self, index: int, pid: int, code: int) -> None:
        if code == NotMigrated.exit_code:  # no restart can fix it: the worker said why
            self._exit_code = code
            return
        if self._stopping or (self.burst and code == 0):
            if code != 0:
                self._exit_code = code if code > 0 else 1
            return
        if code != 0 and self.burst:
            self._exit_code = code if code > 0 else 1
        if code == EXIT_NODE_IN_USE:
            logger.error("kathikon supervisor: worker %d (pid %d) exited with %d: it cannot run "
                         "as configured (its node name is held by another live process, or "
                         "the database is not migrated); not restarted", index, pid, code)
            self._exit_code = EXIT_NODE_IN_USE
            return
        delay = self.restart_delay(index)
        logger.error("kathikon supervisor: worker %d (pid %d) exited with %d; restarting in %gs",
                     index, pid, code, delay)
        deadline = time.monotonic() + delay
        while not self._stopping and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self._stopping:
            self._spawn(index)

    def restart_delay(self, index: int) -> float:
        """The wait before restarting child ``index``, which just exited (and count it).

        Quick crashes in a row back off along ``RESTART_BACKOFF``; a child that ran
        for ``HEALTHY_RUN`` seconds or more starts the sequence again.
        """
        started = self.spawned_at.get(index)
        if started is not None and self.clock() - started >= HEALTHY_RUN:
            self.restarts[index] = 0
        restarts = self.restarts.get(index, 0)
        self.restarts[index] = restarts + 1
        return RESTART_BACKOFF[min(restarts, len(RESTART_BACKOFF) - 1)]

    def _forward(self, signum: int, frame: Any) -> None:
        first = not self._stopping
        self._stopping = True
        if first:
            logger.info("kathikon supervisor: %s, stopping %d worker(s)",
                        signal.Signals(signum).name, len(self.children))
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
