"""Example workers used by ``make demo`` and by the tests."""

from __future__ import annotations

import kathikon


class Greet(kathikon.Worker):
    """Always succeeds and returns a greeting."""

    def perform(self, job):
        return {"greeting": f"hello, {job.args.get('name', 'world')}"}


class Flaky(kathikon.Worker):
    """Fails its first ``failures`` attempts, then succeeds."""

    max_attempts = 5

    def backoff(self, job):
        return 0  # retry at once so the demo does not wait

    def perform(self, job):
        if job.attempts <= job.args.get("failures", 2):
            raise ConnectionError(f"upstream unavailable (attempt {job.attempts})")
        return "ok"


class AlwaysFails(kathikon.Worker):
    """Raises every time and goes dead after ``max_attempts``."""

    max_attempts = 3

    def backoff(self, job):
        return 0

    def perform(self, job):
        raise ValueError(f"cannot process order {job.args.get('order')}")


class Sleepy(kathikon.Worker):
    """Snoozes once for ``{"seconds": n}`` (default 1), then succeeds."""

    def perform(self, job):
        if job.scheduled_at is None:  # first run: not snoozed yet
            return kathikon.Snooze(job.args.get("seconds", 1))
        return "rested"


class Reject(kathikon.Worker):
    """Discards the job: bad input is not worth retrying."""

    def perform(self, job):
        return kathikon.Discard("invalid payload")


class Noop(kathikon.Worker):
    def perform(self, job):
        return None


class Record(kathikon.Worker):
    """Writes one ``Execution`` row per run (whole-process tests count them); with
    ``{"sleep": seconds}`` it first sleeps that long. Retries come at once."""

    def backoff(self, job):
        return 0.05

    def perform(self, job):
        import time

        from testproject.demo.models import Execution

        if job.args.get("sleep"):
            time.sleep(job.args["sleep"])
        Execution.objects.create(job_id=job.id.hex, node=job.attempted_by or "",
                                 attempt=job.attempts)


class Slow(kathikon.Worker):
    """Sleeps ``{"seconds": n}`` (default 1) in small steps, then records its run."""

    timeout = None

    def perform(self, job):
        import time

        from testproject.demo.models import Execution

        deadline = time.monotonic() + job.args.get("seconds", 1)
        while time.monotonic() < deadline:
            time.sleep(0.05)
        Execution.objects.create(job_id=job.id.hex, node=job.attempted_by or "",
                                 attempt=job.attempts)


class Hangs(kathikon.Worker):
    """Ignores its 0.5 s timeout: sleeps ``{"seconds": n}`` (default 3)."""

    timeout = 0.5
    max_attempts = 2

    def backoff(self, job):
        return 0

    def perform(self, job):
        import time

        time.sleep(job.args.get("seconds", 3))
        return "finished late"


class Exits(kathikon.Worker):
    """Calls ``sys.exit()``: the worker must survive it."""

    max_attempts = 1

    def perform(self, job):
        import sys

        sys.exit(3)


class FetchVideo(kathikon.Worker):
    """The demo workflow's first step: "fetches" a video and returns what it found."""

    def perform(self, job):
        return {"video": job.args["video"], "seconds": 93}


class Transcode(kathikon.Worker):
    """A step that reads the result of its ``fetch`` dependency (one query for all deps)."""

    def perform(self, job):
        fetched = job.dep_result("fetch")
        return f"{fetched['video']}@{job.args['height']}p"


class Publish(kathikon.Worker):
    """The fan-in: runs once, after every transcode completed, with all their results."""

    def perform(self, job):
        return sorted(value for name, value in job.dep_results().items() if name != "fetch")
