"""Workers that complete themselves inside their own transaction (kathikon.complete_in_transaction).

Their "own write" is a job of ``Effect`` (a no-op), inserted in the same
``atomic()`` block as the completion.
"""

from __future__ import annotations

import os
import signal

from django.db import transaction

import kathikon


class Effect(kathikon.Worker):
    def perform(self, job: kathikon.Job) -> None:
        return None


class CompleteThenDie(kathikon.Worker):
    """Writes its effect and completes in one transaction, then SIGKILLs its own process."""

    max_attempts = 5

    def perform(self, job: kathikon.Job) -> None:
        with transaction.atomic():
            kathikon.insert(Effect, {"of": job.id.hex, "attempt": job.attempts})
            kathikon.complete_in_transaction(job, {"effect": True})
        if job.args.get("die"):
            os.kill(os.getpid(), signal.SIGKILL)


class CompleteThenFail(kathikon.Worker):
    """Writes, completes, then raises inside the block: both must roll back."""

    max_attempts = 1

    def perform(self, job: kathikon.Job) -> None:
        with transaction.atomic():
            kathikon.insert(Effect, {"of": job.id.hex})
            kathikon.complete_in_transaction(job, {"effect": True})
            raise RuntimeError("after the completion, inside the block")


class CommitThenRaise(kathikon.Worker):
    """Commits its completion, then raises outside the block: it stays completed."""

    def perform(self, job: kathikon.Job) -> None:
        with transaction.atomic():
            kathikon.insert(Effect, {"of": job.id.hex})
            kathikon.complete_in_transaction(job, {"n": 1})
        raise RuntimeError("after the commit")
