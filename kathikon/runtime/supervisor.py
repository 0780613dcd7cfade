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

A child that stops running altogether (a job holding the GIL freezes every
thread of it, or it was stopped) cannot be trusted to time out or shut down:
each child writes a pulse into a pipe the supervisor reads
(:mod:`kathikon.runtime.pulse`), and a child silent for the stall limit is
killed with SIGKILL, before any of its jobs can be rescued and handed to another
process, then restarted like any crashed child (its jobs become crash suspects).
After SIGTERM/SIGINT a silent child is killed after ``STOPPING_STALL`` seconds,
and any child still running ``HARD_STOP_MARGIN`` seconds past the grace period
is killed, so the supervisor always exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time
from collections.abc import Callable
from typing import Any

from django.db import connections

from kathikon import conf
from kathikon.exceptions import NotMigrated
from kathikon.runtime.pulse import PAUSE_GAP, Pulse, PulseReader, pulse_interval, stall_limit
from kathikon.runtime.watchdog import Watchdog

logger = logging.getLogger("kathikon.runtime")

RESTART_BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0)
HEALTHY_RUN = 10.0  # seconds a child must run for its next crash to restart after 1 s again
EXIT_NODE_IN_USE = 78  # sysexits EX_CONFIG (as NotMigrated): as configured, it cannot run
HARD_STOP_MARGIN = 5.0  # seconds past the grace period after which every child is killed


class Supervisor:
    """Run ``make_worker(index, parent_pid)().run()`` in ``processes`` processes.

    ``make_worker`` builds a :class:`~kathikon.runtime.worker.WorkerProcess`
    for child ``index`` (node names must differ between children);
    ``parent_pid`` is ``None`` when the worker runs in this process, watched by a
    :class:`~kathikon.runtime.watchdog.Watchdog`. ``stall_limit`` (seconds of
    silence before a child is killed) and ``grace_period`` default to the settings.
    """

    def __init__(self, processes: int, make_worker: Callable[[int, int | None], Any], *,
                 burst: bool = False, clock: Callable[[], float] = time.monotonic,
                 stall_limit: float | None = None, grace_period: float | None = None) -> None:
        self.processes = max(1, processes)
        self.make_worker = make_worker
        self.burst = burst
        self.children: dict[int, int] = {}  # pid → index
        self.pulses: dict[int, PulseReader] = {}  # pid → its pulse
        self.restarts: dict[int, int] = {}  # index → quick restarts in a row
        self.restart_at: dict[int, float] = {}  # index → when to start it again
        self.clock = clock
        self.spawned_at: dict[int, float] = {}  # index → when its current child started
        self.stall_limit = stall_limit
        self.grace_period = grace_period
        self._stopping = False
        self._stop_requested_at: float | None = None
        self._exit_code = 0

    def run(self) -> int:
        if self.stall_limit is None:
            self.stall_limit = stall_limit()
        if self.grace_period is None:
            self.grace_period = conf.shutdown_grace_period()
        if self.processes == 1:
            return self._run_here()
        if not hasattr(os, "fork"):
            raise OSError("--processes needs os.fork (POSIX); start several workers instead")
        connections.close_all()  # a forked child must not share the parent's sockets
        signal.signal(signal.SIGTERM, self._forward)
        signal.signal(signal.SIGINT, self._forward)
        for index in range(self.processes):
            self._spawn(index)
        last = time.monotonic()
        while self.children or (self.restart_at and not self._stopping):
            self._reap()
            self._restart_due()
            last = self._watch(last)
        return self._exit_code

    # -- internals ---------------------------------------------------------------------------

    def _run_here(self) -> int:
        """One process: run the worker here, with a watchdog beside it where we can fork."""
        assert self.stall_limit is not None
        watchdog = Watchdog(self.stall_limit) if hasattr(os, "fork") else None
        if watchdog is not None:
            connections.close_all()  # the watchdog must not share the worker's sockets
            watchdog.start()
        try:
            return int(self.make_worker(0, None).run())
        finally:
            if watchdog is not None:
                watchdog.stop()

    def _spawn(self, index: int) -> None:
        assert self.stall_limit is not None
        parent = os.getpid()
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never return into the supervisor's code
            code = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.close(read_fd)
                for reader in self.pulses.values():  # its siblings' pulses are not its own
                    reader.close()
                Pulse(write_fd, pulse_interval(self.stall_limit)).start()
                code = int(self.make_worker(index, parent).run())
            except BaseException:
                logger.exception("kathikon worker process %d crashed", os.getpid())
            finally:
                logging.shutdown()
                os._exit(code)
        os.close(write_fd)
        self.children[pid] = index
        self.pulses[pid] = PulseReader(read_fd, time.monotonic())
        self.spawned_at[index] = self.clock()
        logger.info("kathikon supervisor %d: started worker %d (pid %d)", parent, index, pid)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            reader = self.pulses.pop(pid, None)
            if reader is not None:
                reader.close()
            if pid in self.children:
                index = self.children.pop(pid)
                self._reaped(index, pid, os.waitstatus_to_exitcode(status))

    def _restart_due(self) -> None:
        now = time.monotonic()
        for index, at in list(self.restart_at.items()):
            if self._stopping:
                self.restart_at.clear()
                return
            if now >= at:
                del self.restart_at[index]
                self._spawn(index)

    def _watch(self, last: float) -> float:
        """Wait one check interval for pulses; kill children that stopped running (and,
        once stopping, every child past the grace period). Returns when it checked."""
        assert self.stall_limit is not None and self.grace_period is not None
        check = min(0.25, pulse_interval(self.stall_limit))
        fds = [reader.fd for reader in self.pulses.values() if not reader.ended]
        if fds:
            select.select(fds, [], [], check)
        else:
            time.sleep(check)
        now = time.monotonic()
        for pid, reader in list(self.pulses.items()):
            if now - last > check + PAUSE_GAP:  # we did not run either: judge from now on
                reader.forgive(now)
            reader.drain(now)
            if reader.frozen(now, self.stall_limit, stopping=self._stopping):
                reader.killed = True
                logger.error("kathikon supervisor: worker %d (pid %d) has not run for %.1fs "
                             "(a job holding the GIL, or the process was stopped)%s; killed so "
                             "that its jobs are rescued as after a crash, not run twice at "
                             "once", self.children.get(pid, -1), pid, reader.silent_for(now),
                             " after a stop signal" if self._stopping else "")
                self._kill(pid)
        asked = self._stop_requested_at
        if asked is not None and now - asked > self.grace_period + HARD_STOP_MARGIN:
            for pid, reader in list(self.pulses.items()):
                if not reader.killed:
                    reader.killed = True
                    logger.error("kathikon supervisor: worker %d (pid %d) still runs %.1fs after "
                                 "the stop signal (grace period %gs); killed",
                                 self.children.get(pid, -1), pid, now - asked,
                                 self.grace_period)
                    self._kill(pid)
        return now

    @staticmethod
    def _kill(pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

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
        self.restart_at[index] = time.monotonic() + delay

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
            self._stop_requested_at = time.monotonic()
            logger.info("kathikon supervisor: %s, stopping %d worker(s)",
                        signal.Signals(signum).name, len(self.children))
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
