"""Workers for the node fault tests: a poison pill that takes its whole process down.

Each execution is recorded like ``lifeline_workers.SlowRecorded`` does (``<job hex>
<node> <attempt> start``), so a test can count how often the poison ran.
"""

from __future__ import annotations

import os
import signal
import time

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
