"""Workers the workflow tests run as steps (importable by dotted path, as real workers are)."""

from __future__ import annotations

import time

import kathikon


class Record(kathikon.Worker):
    """Returns its args and the results of its deps: what a step saw when it ran."""

    def perform(self, job):
        return {"step": job.step, "args": job.args, "deps": job.dep_results()}


class Fail(kathikon.Worker):
    max_attempts = 1

    def perform(self, job):
        raise RuntimeError(f"{job.step} fails")


class FailOnce(kathikon.Worker):
    """Fails on its first attempt, succeeds on its second (retried by a person or backoff)."""

    max_attempts = 1

    def perform(self, job):
        if job.attempts == 1:
            raise RuntimeError("first attempt fails")
        return {"attempt": job.attempts}


class Plain(kathikon.Worker):
    def perform(self, job):
        return job.args.get("value")


class Witness(kathikon.Worker):
    """Records every run in ``args["log"]`` (one ``O_APPEND`` write per line, so lines from
    several processes never interleave): ``<job hex> <step> <attempt> <early>`` where
    ``early`` counts the deps that had not completed when it started (``args["check"]``).
    Sleeps ``args["seconds"]``; fails while ``args["fail_until"]`` > its attempt."""

    max_attempts = 5

    def perform(self, job):
        early = 0
        if job.args.get("check"):
            early = sum(1 for result in job.dep_results().values() if result != {"ok": True})
        with open(job.args["log"], "a") as log:
            log.write(f"{job.id.hex} {job.step} {job.attempts} {early}\n")
        if job.args.get("seconds"):
            time.sleep(job.args["seconds"])
        if job.attempts < job.args.get("fail_until", 0):
            raise RuntimeError(f"{job.step} fails on attempt {job.attempts}")
        return {"ok": True}


def runs(path) -> list[tuple[str, str, int, int]]:
    """``(job hex, step, attempt, early)`` of every run recorded so far."""
    from pathlib import Path

    path = Path(path)
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        job, step, attempt, early = line.split()
        found.append((job, step, int(attempt), int(early)))
    return found


class CompletesItself(kathikon.Worker):
    """Completes in its own transaction (``kathikon.complete_in_transaction``)."""

    def perform(self, job):
        from django.db import transaction

        with transaction.atomic():
            kathikon.complete_in_transaction(job, {"self": True})
