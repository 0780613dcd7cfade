"""A worker class that only a newer release has.

This folder is on ``sys.path`` only for the "new" worker process of
``tests/runtime/test_unknown_worker.py`` (and for the test process that inserts its
jobs): the "old" worker process cannot import it, as during a rolling deploy.
"""

from __future__ import annotations

import kathikon
from tests.runtime.lifeline_workers import record


class AddedInRelease(kathikon.Worker):
    max_attempts = 3

    def perform(self, job: kathikon.Job) -> dict[str, object]:
        record(job.args["log"], job, "start")
        return {"node": job.attempted_by}
