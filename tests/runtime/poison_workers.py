"""Poison jobs for the executor's fault tests: each one tries to wedge the worker running it.

Every worker here is importable by dotted path from a real ``kathikon_worker``
process; ``max_attempts = 2`` and an immediate retry let a test see the poison
go retryable, run again and end ``dead`` with its real error in a few seconds.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
import threading

from django.db import transaction

import kathikon

HELD: dict[str, threading.Event] = {}  # in-process tests: jobs that block until released


class Poison(kathikon.Worker):
    max_attempts = 2

    def backoff(self, job):
        return 0


class TimedeltaTimeout(Poison):
    """A ``timedelta`` where seconds were expected: converted, the job runs normally."""

    timeout = dt.timedelta(seconds=30)

    def perform(self, job):
        return {"timeout_ok": True}


class JunkTimeout(Poison):
    """A timeout that is no number of seconds: the attempt fails with a clear error."""

    timeout = "30 seconds"  # type: ignore[assignment]

    def perform(self, job):
        return "never runs"


class SyncExit(Poison):
    def perform(self, job):
        sys.exit(3)


class AsyncSystemExit(Poison):
    async def perform(self, job):
        await asyncio.sleep(0)
        raise SystemExit(4)


class AsyncKeyboardInterrupt(Poison):
    async def perform(self, job):
        await asyncio.sleep(0)
        raise KeyboardInterrupt


class StopsTheLoop(Poison):
    """Ends the shared event loop from a callback, then waits on it."""

    async def perform(self, job):
        asyncio.get_running_loop().call_soon(sys.exit, 5)
        await asyncio.sleep(job.args.get("sleep", 30))


class AsyncSleeps(kathikon.Worker):
    async def perform(self, job):
        await asyncio.sleep(job.args.get("sleep", 0))
        return "slept"


class LeavesTransactionOpen(Poison):
    """Writes a job row inside ``atomic()`` and returns without leaving the block."""

    def perform(self, job):
        transaction.atomic().__enter__()
        kathikon.insert("tests.workers.Succeed", {"written_by": job.id.hex},
                        queue="poison-writes")
        return "returned inside a transaction"


class Unprintable(Exception):
    """An exception that cannot be formatted: str() and repr() raise."""

    def __str__(self):
        raise KeyboardInterrupt("str() of this exception")

    def __repr__(self):
        raise KeyboardInterrupt("repr() of this exception")


class KillsItsThread(Poison):
    """Raises an exception that cannot be described: recording it kills the thread that tries."""

    def perform(self, job):
        raise Unprintable()


class Held(kathikon.Worker):
    """Blocks until the test sets ``HELD[job.args["key"]]`` (in-process tests only)."""

    def perform(self, job):
        event = HELD.setdefault(job.args["key"], threading.Event())
        event.wait(job.args.get("wait", 10))
        return "released"


class HeldFiveSeconds(Held):
    timeout = 5


class HeldTimedelta(Held):
    timeout = dt.timedelta(seconds=30)


class WaitsForFile(kathikon.Worker):
    """Records its run (like ``demo.workers.Record``) once the file ``args["path"]`` exists,
    so a test decides when its ack is written (up to 60 s)."""

    def perform(self, job):
        import time
        from pathlib import Path

        from testproject.demo.models import Execution

        deadline = time.monotonic() + 60
        while not Path(job.args["path"]).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        Execution.objects.create(job_id=job.id.hex, node=job.attempted_by or "",
                                 attempt=job.attempts)
