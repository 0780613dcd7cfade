"""Internal: the promoter — scheduled jobs that are due become available.

Runs every ``SCHEDULER_INTERVAL`` on every node. Each batch is one short
transaction that moves at most ``limit`` due jobs (and, on PostgreSQL, sends
one ``NOTIFY`` per queue so idle dispatchers wake at once); batches repeat
until one comes back short. The move is conditional on the job still being
``scheduled``, so promoters on many nodes at once never double-promote.
"""

from __future__ import annotations

from typing import Any

from kathikon import conf, storage
from kathikon.runtime.service import PeriodicService


class Promoter(PeriodicService):
    """Move due ``scheduled`` jobs to ``available``, ``limit`` per transaction.

    Options: ``interval`` (default ``SCHEDULER_INTERVAL``), ``limit`` (1000),
    ``clock`` (the application clock: scheduled times are written with it).
    """

    name = "promoter"

    def __init__(self, node: str, *, limit: int = 1000, **options: Any) -> None:
        super().__init__(node, **options)
        self.limit = limit

    def default_interval(self) -> float:
        return conf.scheduler_interval()

    def run_once(self) -> int:
        """Promote every due job; returns how many."""
        now = self.now()
        total = 0
        while True:
            promoted = storage.promote_scheduled(now, limit=self.limit)
            total += promoted
            if promoted < self.limit or self.stopping:
                return total
