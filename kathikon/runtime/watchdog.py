"""Internal: the watchdog — what kills a single worker process frozen by a job holding the GIL.

Children of ``--processes N`` are watched by their supervisor. A worker run as
one process (the default) has no supervisor, so it forks this small process
before it starts any thread: the watchdog reads the worker's pulse
(:mod:`kathikon.runtime.pulse`) and sends it SIGKILL once it has been silent for
the stall limit, before another node could rescue its jobs and run them a
second time. After SIGTERM or SIGINT (the whole process group gets them from a
terminal or systemd) it kills a worker that stays silent for ``STOPPING_STALL``
seconds, since a frozen worker cannot run its graceful shutdown; a worker that
pulses shuts down by itself.

The watchdog touches neither the database nor Django: it only reads a pipe. It
ends when the worker closes the pipe (exit) or when it is no longer the worker's
child, and it never signals any other process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time
from typing import Any

from kathikon.runtime.pulse import PAUSE_GAP, Pulse, PulseReader, pulse_interval

logger = logging.getLogger("kathikon.runtime")

REAP_TIMEOUT = 2.0  # seconds to wait for the watchdog to end after the worker stops


class Watchdog:
    """Fork a watchdog for this process; ``stop()`` ends it (call it from the same process)."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.pid: int | None = None
        self.pulse: Pulse | None = None

    def start(self) -> None:
        read_fd, write_fd = os.pipe()
        worker = os.getpid()
        pid = os.fork()
        if pid == 0:  # the watchdog: never return into the worker's code
            code = 1
            try:
                os.close(write_fd)
                code = watch(worker, read_fd, self.limit)
            finally:
                os._exit(code)
        os.close(read_fd)
        self.pid = pid
        self.pulse = Pulse(write_fd, pulse_interval(self.limit))
        self.pulse.start()

    def stop(self) -> None:
        """Stop pulsing, close the pipe (the watchdog sees its end) and reap the watchdog."""
        if self.pulse is not None:
            self.pulse.stop()
            self.pulse.join(REAP_TIMEOUT)
            with contextlib.suppress(OSError):
                os.close(self.pulse.fd)
        if self.pid is None:
            return
        deadline = time.monotonic() + REAP_TIMEOUT
        with contextlib.suppress(ChildProcessError):  # a job's os.wait() may have reaped it
            while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
                    break
                time.sleep(0.01)
        self.pid = None


def watch(worker: int, fd: int, limit: float) -> int:
    """The watchdog's loop: kill ``worker`` (our parent) once its pulse on ``fd`` stops."""
    stopping: list[float] = []

    def on_signal(signum: int, frame: Any) -> None:
        stopping.append(time.monotonic())

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    check = pulse_interval(limit)
    reader = PulseReader(fd, time.monotonic())
    last = time.monotonic()
    while True:
        select.select([fd], [], [], check)
        now = time.monotonic()
        if now - last > check + PAUSE_GAP:
            reader.forgive(now)
        last = now
        reader.drain(now)
        if reader.ended or os.getppid() != worker:
            return 0
        if reader.frozen(now, limit, stopping=bool(stopping)):
            logger.error("kathikon watchdog: worker process %d has not run for %.1fs (a job "
                         "holding the GIL, or the process was stopped)%s; killed so that its "
                         "jobs are rescued as after a crash, not run twice at once", worker,
                         reader.silent_for(now), " after a stop signal" if stopping else "")
            os.kill(worker, signal.SIGKILL)
            return 0
