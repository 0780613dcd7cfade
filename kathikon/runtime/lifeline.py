"""Internal: the lifeline — rescues jobs held by nodes that vanished.

Every node runs it (every ``HEARTBEAT_INTERVAL`` by default). A job that is
``claimed`` or ``running`` on a node whose heartbeat is older than
``RESCUE_AFTER`` by the database's clock, on a node recorded as stopped, or on a
node with no row at all that started more than ``RESCUE_AFTER`` ago, goes back
to ``retryable`` (available at once), or to ``dead`` when it has used all its
attempts, with an error entry of kind ``kathikon.NodeVanished`` naming the node.
The write is fenced on the job's lease, and candidates are locked with
``SKIP LOCKED``, so lifelines on many nodes rescue each job exactly once and a
node that wakes up later cannot overwrite the rescue. Parents of open batches
are left alone. Then the silent nodes themselves are recorded as ``crashed``
(once each, with a warning), so their rows no longer say ``running``; that
changes no rescue (see kathikon.storage.nodes). See ``docs/reliability.md``.

Signals: ``job_rescued(sender=worker class, job, node=<vanished node>, state)``.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any

from kathikon import conf, storage
from kathikon.runtime.service import PeriodicService
from kathikon.storage.nodes import mark_nodes_crashed
from kathikon.storage.rescue import Rescued
from kathikon.workflows.announce import announce

logger = logging.getLogger("kathikon.runtime")


class Lifeline(PeriodicService):
    """Rescue the jobs of nodes silent for ``rescue_after`` seconds.

    Options: ``interval`` (default ``HEARTBEAT_INTERVAL``), ``rescue_after``
    (default ``RESCUE_AFTER``), ``limit`` (jobs per transaction, 500), ``clock``
    (default: the database's clock; tests inject their own), ``settle_after``
    (default two heartbeat intervals: how long to hold back after start and after
    the database was unreachable, so live nodes can heartbeat first).
    """

    name = "lifeline"

    def __init__(self, node: str, *, rescue_after: float | None = None, limit: int = 500,
                 settle_after: float | None = None, **options: Any) -> None:
        self.settle_after = (2 * conf.heartbeat_interval() if settle_after is None
                             else settle_after)
        options.setdefault("initial_delay", self.settle_after)
        super().__init__(node, **options)
        if not self.clock_injected:
            self.clock = storage.db_now
        self.rescue_after = conf.rescue_after() if rescue_after is None else rescue_after
        self.limit = limit
        self._quiet_until = 0.0

    def default_interval(self) -> float:
        return conf.heartbeat_interval()

    def run_once(self) -> list[Rescued]:
        """Rescue every job due for rescue now; returns them."""
        if self.failures:
            # The database was unreachable: so was everybody's heartbeat. Give live nodes
            # time to write one before judging them, or we would rescue the whole fleet.
            self._quiet_until = time.monotonic() + self.settle_after
        if time.monotonic() < self._quiet_until:
            self.now()  # still notice if the database goes away again
            return []
        now = self.now()
        cutoff = now - dt.timedelta(seconds=self.rescue_after)
        rescued: list[Rescued] = []
        while True:
            batch = storage.rescue_jobs(cutoff, rescuer=self.node, now=now, limit=self.limit)
            rescued.extend(batch)
            if len(batch) < self.limit:
                self._mark_crashed(cutoff)
                break
            if self.stopping:
                break
        _check_batches(rescued)
        return rescued

    def _mark_crashed(self, cutoff: dt.datetime) -> None:
        """After the rescue of their jobs (marked first, they would be rescued and charged
        alike: silence is judged by ``heartbeat_at``), the silent nodes say ``crashed``."""
        for name in mark_nodes_crashed(cutoff):
            logger.warning("kathikon node %s silent for more than %gs (RESCUE_AFTER): "
                           "recorded as crashed by %s", name, self.rescue_after, self.node)


def _check_batches(rescued: list[Rescued]) -> None:
    """A child rescued straight to ``dead`` may have been the last one its batch waited for;
    a workflow step's rescue settled what waited on it (signals now)."""
    for item in rescued:
        announce(item.job.settled)
    finished = {r.job.batch_id for r in rescued if r.state == "dead" and r.job.batch_id}
    if finished:
        from kathikon.batch import children_finished

        children_finished(finished)
