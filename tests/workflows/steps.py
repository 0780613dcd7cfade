"""Workers the workflow tests run as steps (importable by dotted path, as real workers are)."""

from __future__ import annotations

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
