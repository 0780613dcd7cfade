"""Workers the test-suite enqueues (importable by dotted path, as real workers are)."""

from __future__ import annotations

import kathikon


class Succeed(kathikon.Worker):
    def perform(self, job):
        return {"echo": job.args}


class ReturnsNothing(kathikon.Worker):
    def perform(self, job):
        return None


class Unserialisable(kathikon.Worker):
    def perform(self, job):
        return object()


class Explode(kathikon.Worker):
    max_attempts = 3

    def perform(self, job):
        raise RuntimeError(f"boom {job.attempts}")


class AskRetry(kathikon.Worker):
    def perform(self, job):
        return kathikon.Retry("later", in_seconds=30)


class RaiseDiscard(kathikon.Worker):
    def perform(self, job):
        raise kathikon.Discard("bad input")


class SnoozeTen(kathikon.Worker):
    def perform(self, job):
        return kathikon.Snooze(10)


class CustomBackoff(kathikon.Worker):
    def backoff(self, job):
        return 1000

    def perform(self, job):
        raise ValueError("nope")


class BrokenBackoff(kathikon.Worker):
    def backoff(self, job):
        raise ZeroDivisionError

    def perform(self, job):
        raise ValueError("nope")


class Emails(kathikon.Worker):
    queue = "emails"
    priority = 7
    max_attempts = 4
    timeout = 5

    def perform(self, job):
        return "sent"


class AsyncSucceed(kathikon.Worker):
    async def perform(self, job):
        return {"async": True}


class NotAWorker:
    pass


class SyncAccount(kathikon.Worker):
    """Unique per account_id while unfinished (the other args do not count)."""

    unique = kathikon.Unique(keys=["account_id"])

    def perform(self, job):
        return None


class FailOnce(kathikon.Worker):
    unique = kathikon.Unique(states=kathikon.unique.UNSTARTED)

    def perform(self, job):
        raise ValueError("once")
