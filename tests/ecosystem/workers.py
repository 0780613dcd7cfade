"""Workers for the ecosystem tests: async workers and a few helpers."""

from __future__ import annotations

import asyncio
import time

import kathikon


class AsyncEcho(kathikon.Worker):
    async def perform(self, job):
        await asyncio.sleep(job.args.get("sleep", 0))
        return {"echo": job.args.get("value"), "loop": id(asyncio.get_running_loop())}


class AsyncFails(kathikon.Worker):
    max_attempts = 2

    async def perform(self, job):
        await asyncio.sleep(0)
        raise KeyError("missing")


class AsyncOutcome(kathikon.Worker):
    async def perform(self, job):
        kind = job.args["kind"]
        if kind == "snooze":
            return kathikon.Snooze(30)
        if kind == "discard":
            raise kathikon.Discard("not wanted")
        return kathikon.Retry("again", in_seconds=60)


class AsyncSlow(kathikon.Worker):
    timeout = 0.3
    max_attempts = 2

    async def perform(self, job):
        await asyncio.sleep(5)


class Chain(kathikon.Worker):
    """Inserts the next link until ``left`` reaches 0 (for drain_queue with_recursion)."""

    def perform(self, job):
        left = job.args["left"]
        if left > 0:
            kathikon.insert(Chain, {"left": left - 1})
        return left


class Canceller(kathikon.Worker):
    def perform(self, job):
        kathikon.cancel(job.args["victim"])


class SnoozeOnce(kathikon.Worker):
    def perform(self, job):
        if not job.meta.get("woke") and job.attempts == 1 and not job.scheduled_at:
            return kathikon.Snooze(60)
        return "awake"


class Sleepy(kathikon.Worker):
    def perform(self, job):
        time.sleep(job.args.get("seconds", 0))
        return "slept"


class AsyncOrm(kathikon.Worker):
    """Uses Django's async ORM from the worker's event loop."""

    async def perform(self, job):
        from kathikon.models import Job

        return {"jobs": await Job.objects.acount(),
                "mine": (await Job.objects.aget(pk=job.id)).worker}
