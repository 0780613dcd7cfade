"""Workers the tracing tests run (importable by dotted path, as real workers are)."""

from __future__ import annotations

import kathikon


class FailsFirst(kathikon.Worker):
    """Fails its first attempt, then completes; retried at once."""

    def backoff(self, job):
        return 0

    def perform(self, job):
        if job.attempts == 1:
            raise ConnectionError("upstream down")
        return "ok"


class OpensASpan(kathikon.Worker):
    """Opens a span of its own inside ``perform``: it must be a child of the attempt's."""

    def perform(self, job):
        from opentelemetry import trace

        with trace.get_tracer("app").start_as_current_span("charge card"):
            return "charged"


class Overruns(kathikon.Worker):
    """A synchronous job that runs past its timeout (the pool fails the attempt meanwhile)."""

    timeout = 0.3
    max_attempts = 1

    def perform(self, job):
        import time

        time.sleep(job.args.get("seconds", 1.0))
        return "too late"
