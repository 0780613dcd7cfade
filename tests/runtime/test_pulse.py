"""The pulse between a worker process and whatever watches it, without worker processes.

The whole-process cases (a job holding the GIL under a supervisor and under a
watchdog) are in test_frozen_processes.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable

import pytest

from kathikon.runtime import supervisor as supervisor_module
from kathikon.runtime.pulse import (
    MIN_STALL_LIMIT,
    STOPPING_STALL,
    Pulse,
    PulseReader,
    pulse_interval,
    stall_limit,
)
from kathikon.runtime.supervisor import Supervisor
from kathikon.runtime.watchdog import Watchdog


@pytest.fixture
def pipe():
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        with contextlib.suppress(OSError):
            os.close(fd)


@pytest.mark.parametrize(("values", "limit"), [
    ({}, 27.5),  # defaults: RESCUE_AFTER 60, HEARTBEAT_INTERVAL 5
    ({"RESCUE_AFTER": 3, "HEARTBEAT_INTERVAL": 0.5}, 1.25),
    ({"RESCUE_AFTER": 1.1, "HEARTBEAT_INTERVAL": 1}, MIN_STALL_LIMIT),
])
def test_the_stall_limit_comes_halfway_before_a_rescue(values, limit, settings):
    settings.KATHIKON = {**settings.KATHIKON, **values}
    assert stall_limit() == pytest.approx(limit)
    assert pulse_interval(limit) <= min(1.0, limit / 5)


def test_a_reader_hears_each_pulse_and_judges_silence(pipe):
    read_fd, write_fd = pipe
    reader = PulseReader(read_fd, 100.0)
    assert not reader.frozen(101.0, limit=2.0)
    assert reader.frozen(102.5, limit=2.0)
    os.write(write_fd, b"...")
    reader.drain(103.0)
    assert reader.heard_at == 103.0 and reader.silent_for(104.0) == 1.0
    assert not reader.frozen(104.0, limit=2.0)
    # Asked to stop, a silent process gets STOPPING_STALL, not the whole limit.
    assert reader.frozen(103.0 + STOPPING_STALL + 0.1, limit=30.0, stopping=True)
    assert not reader.frozen(103.0 + STOPPING_STALL + 0.1, limit=30.0)
    reader.killed = True
    assert not reader.frozen(200.0, limit=2.0)  # killed once, never twice


def test_a_reader_forgives_a_pause_of_its_own_and_an_ended_pipe_is_never_frozen(pipe):
    read_fd, write_fd = pipe
    reader = PulseReader(read_fd, 100.0)
    reader.forgive(150.0)  # the reader itself was stopped: count again from now
    assert not reader.frozen(151.0, limit=2.0)
    os.close(write_fd)
    reader.drain(152.0)
    assert reader.ended and not reader.frozen(500.0, limit=2.0)


def test_the_pulse_thread_writes_until_stopped_and_survives_a_full_or_closed_pipe(pipe):
    read_fd, write_fd = pipe
    beat = Pulse(write_fd, 0.01)
    beat.start()
    time.sleep(0.1)
    reader = PulseReader(read_fd, 0.0)
    reader.drain(1.0)
    assert reader.heard_at == 1.0
    beat.stop()
    beat.join(1)
    assert not beat.is_alive()
    # Nobody reads: a full pipe drops pulses, a closed one ends the thread.
    os.close(read_fd)
    orphan = Pulse(write_fd, 0.01)
    orphan.start()
    orphan.join(1)
    assert not orphan.is_alive()


def in_child(body: Callable[[], int]) -> int:
    """Run ``body`` in a forked child (the 'worker' a watchdog judges, so the test process
    is never at risk); its exit code, negative for a signal."""
    child = os.fork()
    if child == 0:
        code = 1
        try:
            code = body()
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


def test_the_watchdog_kills_a_silent_worker():
    def frozen_worker() -> int:
        watchdog = Watchdog(limit=0.5)
        watchdog.start()
        assert watchdog.pulse is not None
        watchdog.pulse.stop()  # the frozen worker: no thread of it runs
        time.sleep(10)
        return 0

    started = time.monotonic()
    assert in_child(frozen_worker) == -signal.SIGKILL
    assert time.monotonic() - started < 5


def test_a_pulsing_worker_is_left_alone_and_its_stopped_watchdog_is_reaped():
    def pulsing_worker() -> int:
        watchdog = Watchdog(limit=0.5)
        watchdog.start()
        pid = watchdog.pid
        assert pid is not None
        time.sleep(1.0)  # pulsing: not killed
        watchdog.stop()
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return 0  # reaped by stop()
        return 1

    assert in_child(pulsing_worker) == 0


def test_a_supervisor_kills_every_child_left_past_the_grace_period(monkeypatch):
    """A child that pulses but never stops (it ignores SIGTERM) is killed once the grace
    period and HARD_STOP_MARGIN have passed, so the supervisor always returns."""
    class Stubborn:
        def run(self) -> int:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(60)
            return 0

    supervisor = Supervisor(2, lambda index, parent: Stubborn(), stall_limit=30.0,
                            grace_period=0.0)
    margin = 1.0  # instead of HARD_STOP_MARGIN, to keep this test short
    monkeypatch.setattr(supervisor_module, "HARD_STOP_MARGIN", margin)
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGALRM, lambda *a: os.kill(os.getpid(), signal.SIGTERM))
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        started = time.monotonic()
        code = supervisor.run()
        took = time.monotonic() - started
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    assert code == 1  # killed children are a failed stop
    assert took < 0.5 + margin + 2
    assert not supervisor.children
