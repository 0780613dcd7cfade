"""Start and stop real ``kathikon_worker`` processes, and read their memory."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


class Workers:
    """``count`` worker processes, each ``python -m django kathikon_worker`` (default settings).

    A context manager: leaving it stops them (SIGTERM, then SIGKILL to each one's
    own process group after ``grace`` seconds), even when the benchmark fails.
    """

    def __init__(self, count: int, log_dir: Path, *, env: dict[str, str] | None = None,
                 args: tuple[str, ...] = (), grace: float = 15.0):
        self.count, self.log_dir, self.env, self.args, self.grace = count, log_dir, env, args, grace
        self.procs: list[subprocess.Popen] = []
        self.started_at = 0.0

    def __enter__(self) -> Workers:
        self.started_at = time.monotonic()
        for i in range(self.count):
            log = open(self.log_dir / f"worker-{len(os.listdir(self.log_dir))}-{i}.log", "w")
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "django", "kathikon_worker", *self.args],
                cwd=ROOT, env=worker_env(self.env), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True))
            log.close()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self.procs]

    def check_alive(self) -> None:
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"worker {proc.pid} exited with {proc.returncode} "
                                   f"(log in {self.log_dir})")

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):  # the group we started, only
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs = []


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (from /proc/<pid>/task/*/children)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as fh:
                    todo.extend(int(child) for child in fh.read().split())
        except OSError:
            continue
    return found


def rss_kib(pid: int) -> int:
    """VmRSS of one process in KiB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_kib(pid: int) -> int:
    """The summed VmRSS of a worker process and its children."""
    return sum(rss_kib(p) for p in tree(pid))


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def tree_cpu_seconds(pids: list[int]) -> float:
    return sum(cpu_seconds(p) for pid in pids for p in tree(pid))


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy so far, summed over its cores.

    Busy is everything but idle and iowait. Over a wall-clock interval it says how
    many cores a drain kept busy (the workers, their database and everyone else),
    which bounds what a second worker process on the same machine can add.
    """
    with open("/proc/stat") as fh:
        ticks = [int(value) for value in fh.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / _TICK
