"""Workers for the scheduling tests (importable by dotted path)."""

from __future__ import annotations

import kathikon
from kathikon import Batch
from tests.workers import Succeed

CHILD = "tests.workers.Succeed"


class OpensBatch(kathikon.Worker):
    """A parent that opens a batch, adds ``children`` and returns with the batch still open."""

    def perform(self, job):
        batch = Batch.open(job.id, on_complete=(Succeed, {"from": "parent"}))
        Batch.append(batch.id, [(CHILD, {"n": n}) for n in range(job.args.get("children", 2))])
        return {"batch": batch.id}


class OpensTwoBatches(kathikon.Worker):
    def perform(self, job):
        first = Batch.open(job.id, on_complete=None)
        second = Batch.open(job.id, on_complete=None)
        return {"batches": [first.id, second.id]}


class OpensAndCloses(kathikon.Worker):
    def perform(self, job):
        batch = Batch.open(job.id, on_complete=(Succeed, {}))
        Batch.append(batch.id, [(CHILD, {"n": 1})])
        Batch.close(batch.id)
        return "closed inside"


class StartsBatch(kathikon.Worker):
    def perform(self, job):
        batch = Batch.start(job.id, [(CHILD, {"n": n}) for n in range(3)],
                            on_complete=(Succeed, {}))
        return batch.id


class OpensThenFails(kathikon.Worker):
    max_attempts = 2

    def perform(self, job):
        Batch.open(job.id, on_complete=None)
        raise RuntimeError("after open")


class AsyncOpensBatch(kathikon.Worker):
    async def perform(self, job):
        from asgiref.sync import sync_to_async

        batch = await sync_to_async(Batch.open)(job.id, on_complete=None)
        return {"batch": batch.id}
