"""Internal: the pulse — proof, seen from another process, that a worker process still runs.

A job that holds the GIL (a catastrophic regex, a C loop that never releases it)
freezes every thread of its process: its timeout cannot fire and its heartbeat
stops. After ``RESCUE_AFTER`` another node would rescue its jobs and run them a
second time while the frozen process still runs the first. Nothing inside that
process can prevent it, so something outside must: the ``--processes``
supervisor, or for a single worker process the watchdog
(``kathikon.runtime.watchdog``).

The worker process writes one byte into a pipe every ``interval`` seconds from a
thread of its own (:class:`Pulse`); writing needs the GIL, so a frozen process
writes nothing. The process at the other end (:class:`PulseReader`) kills it
with SIGKILL once it has been silent for :func:`stall_limit` seconds — halfway
between its last heartbeat and the earliest moment another node may rescue its
jobs, so the process is dead before any of its jobs can be handed out again.
The restarted process (or the lifeline elsewhere) then rescues them as after any
crash: crash suspects, charged to the job that was running alone (the crash
budget in docs/reliability.md).
"""

from __future__ import annotations

import contextlib
import os
import threading

from kathikon import conf

MIN_STALL_LIMIT = 0.5  # seconds: never judge a process on less than this
STOPPING_STALL = 2.0  # seconds of silence that, after SIGTERM, mean "cannot shut down"
PAUSE_GAP = 1.0  # the reader itself did not run for this much longer than it meant to


def stall_limit() -> float:
    """Seconds of silence after which a worker process is killed.

    Half of ``RESCUE_AFTER - HEARTBEAT_INTERVAL``: the last heartbeat was at most
    one interval before the last pulse, so the kill comes well before the heartbeat
    is ``RESCUE_AFTER`` old (27.5 s with the defaults)."""
    return max(MIN_STALL_LIMIT, (conf.rescue_after() - conf.heartbeat_interval()) / 2)


def pulse_interval(limit: float) -> float:
    """How often to write a pulse: at least five pulses within ``limit``, at most one a
    second."""
    return min(1.0, limit / 5)


class Pulse(threading.Thread):
    """Write one byte into ``fd`` every ``interval`` seconds until stopped.

    The pipe is non-blocking: a reader that fell behind (a full pipe) loses a pulse,
    never blocks the worker; a reader that is gone ends the thread."""

    def __init__(self, fd: int, interval: float) -> None:
        super().__init__(name="kathikon-pulse", daemon=True)
        self.fd, self.interval = fd, interval
        self._stop_event = threading.Event()
        os.set_blocking(fd, False)

    def run(self) -> None:
        while True:
            try:
                os.write(self.fd, b".")
            except BlockingIOError:
                pass
            except OSError:  # the reader is gone (or the fd closed): nobody listens
                return
            if self._stop_event.wait(self.interval):
                return

    def stop(self) -> None:
        self._stop_event.set()


class PulseReader:
    """The reading end of one process's pulse pipe, and when it last spoke."""

    def __init__(self, fd: int, clock: float) -> None:
        self.fd = fd
        self.heard_at = clock
        self.ended = False  # end of file: the process exited (or is exiting)
        self.killed = False
        os.set_blocking(fd, False)

    def drain(self, now: float) -> None:
        """Read whatever arrived; any byte counts as a pulse at ``now``."""
        while not self.ended:
            try:
                data = os.read(self.fd, 4096)
            except BlockingIOError:
                return
            except OSError:
                self.ended = True
                return
            if not data:
                self.ended = True
                return
            self.heard_at = now

    def silent_for(self, now: float) -> float:
        return 0.0 if self.ended else now - self.heard_at

    def frozen(self, now: float, limit: float, *, stopping: bool = False) -> bool:
        """Whether to kill the process now: silent past ``limit``, or, once it was asked
        to stop, past ``STOPPING_STALL`` (a frozen process cannot run its shutdown)."""
        if self.killed:
            return False
        silent = self.silent_for(now)
        return silent > limit or (stopping and silent > min(limit, STOPPING_STALL))

    def forgive(self, now: float) -> None:
        """The reader was not running (the whole group stopped, the host suspended): it
        cannot tell a silent process from its own absence, so it starts counting again."""
        self.heard_at = max(self.heard_at, now)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

