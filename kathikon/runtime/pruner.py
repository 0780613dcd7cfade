"""Internal: the pruner — forgets finished jobs and long-gone nodes.

Runs every ``PRUNE_INTERVAL`` on every node. Where the job table is partitioned
(``storage.partitions``) it first creates the days ahead and drops the expired
ones. Terminal jobs (completed, dead,
cancelled) that finished more than ``RETENTION_PERIOD`` ago are deleted with
their history events in chunks of ``limit`` rows, one short transaction per
chunk, so a big table is never locked for long. Node rows stopped, or silent,
for longer than ``node_retention`` (default: a day, and never less than ten
times ``RESCUE_AFTER``) are deleted too. Pruners on many nodes at once only
race to delete the same rows; nothing is deleted twice or wrongly. The first
run waits a random part of the interval so nodes started together spread out.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass
from typing import Any

from kathikon import conf, storage
from kathikon.runtime.service import PeriodicService

NODE_RETENTION = 86400.0


@dataclass(frozen=True, slots=True)
class Pruned:
    jobs: int
    nodes: int


class Pruner(PeriodicService):
    """Delete terminal jobs older than ``retention`` and stale node rows, in chunks.

    Options: ``interval`` (default ``PRUNE_INTERVAL``), ``retention`` (seconds,
    default ``RETENTION_PERIOD``), ``limit`` (rows per chunk, 1000),
    ``max_chunks`` (per run, 100; the rest waits for the next run),
    ``node_retention`` (seconds, see above), ``clock``.
    """

    name = "pruner"

    def __init__(self, node: str, *, retention: float | None = None, limit: int = 1000,
                 max_chunks: int = 100, node_retention: float | None = None,
                 **options: Any) -> None:
        super().__init__(node, **options)
        if "initial_delay" not in options:
            self.initial_delay = random.uniform(0, min(self.interval, 60.0))
        self.retention = conf.retention_period() if retention is None else retention
        self.limit = limit
        self.max_chunks = max_chunks
        self.node_retention = (max(NODE_RETENTION, 10 * conf.rescue_after())
                               if node_retention is None else node_retention)

    def default_interval(self) -> float:
        return conf.prune_interval()

    def run_once(self) -> Pruned:
        before = self.now() - dt.timedelta(seconds=self.retention)
        # A partitioned job table (PostgreSQL): days ahead are made, expired days dropped
        # whole; what is left to delete row by row is the live partition's few.
        storage.partitions.maintain(now=self.node_cutoff(),
                                    retention=dt.timedelta(seconds=self.retention))
        # Partitioned, a retention of a day or more leaves the day partitions' jobs to go
        # with their day (kept up to a day longer); a shorter one deletes them row by row.
        whole_days = self.retention >= 86400
        jobs = 0
        for _ in range(self.max_chunks):
            deleted = storage.prune_jobs(before, limit=self.limit, whole_days=whole_days)
            jobs += deleted
            if deleted < self.limit or self.stopping:
                break
        storage.workflows.prune_workflows(before, limit=self.limit)  # whose steps are gone
        # Node rows carry database-clock times: compare them with the database's clock.
        nodes = storage.delete_stale_nodes(
            self.node_cutoff() - dt.timedelta(seconds=self.node_retention))
        return Pruned(jobs=jobs, nodes=nodes)

    def node_cutoff(self) -> dt.datetime:
        return self.now() if self.clock_injected else storage.db_now()
