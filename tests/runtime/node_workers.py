"""Workers for the node fault tests: a poison pill that takes its whole process down, and
a job that freezes its whole process by holding the GIL.

Each execution is recorded like ``lifeline_workers.SlowRecorded`` does (``<job hex>
<node> <attempt> start``), so a test can count how often the poison ran.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import time
from pathlib import Path

import kathikon
from tests.runtime.lifeline_workers import record


class Poison(kathikon.Worker):
    """Sleeps ``args["after"]`` seconds, then kills its process: ``os._exit(1)`` or, with
    ``args["how"] == "sigkill"``, SIGKILL to itself (what the OOM killer does)."""

    max_attempts = 20

    def perform(self, job: kathikon.Job) -> None:
        record(job.args["log"], job, "start")
        time.sleep(job.args.get("after", 0.3))
        if job.args.get("how") == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(1)


class HoldsTheGil(kathikon.Worker):
    """One C call that keeps the GIL for ``args["seconds"]`` (libc ``sleep`` through
    ``ctypes.PyDLL``, which never releases it: what a catastrophic regex or a C loop does),
    so no other thread of its process runs: not its timeout, not the heartbeat.

    Records ``start`` and ``end``, and ``overlap`` when another run of it is live in
    another process at the same moment (an ``flock`` on ``args["lock"]``, which the kernel
    drops when the holding process dies). With ``args["once"]`` (a path) it freezes only
    while that file does not exist yet, and creates it: a later run simply completes.
    """

    timeout = 2
    max_attempts = 20

    def perform(self, job: kathikon.Job) -> str:
        lock = open(job.args["lock"], "a")  # noqa: SIM115  (held until the process dies)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            record(job.args["log"], job, "overlap")
        record(job.args["log"], job, "start")
        once = job.args.get("once")
        if once is None or not Path(once).exists():
            if once is not None:
                Path(once).touch()
            ctypes.PyDLL(None).sleep(int(job.args.get("seconds", 30)))
        record(job.args["log"], job, "end")
        lock.close()
        return "thawed"
