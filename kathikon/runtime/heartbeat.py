"""Internal: the heartbeat — proof, written every ``HEARTBEAT_INTERVAL``, that a node lives.

The time is the database's (``storage.heartbeat``), so the lifeline on another
host compares it with the same clock. A node whose row has gone (pruned while it
was frozen, deleted by an operator) writes it again. A node that notices it was
silent longer than ``RESCUE_AFTER`` logs a warning: other nodes may have rescued
its jobs, and its own late acknowledgements for them will be refused. A node
whose name another process has taken over meanwhile (see ``storage.nodes``)
stops beating and calls ``on_superseded``: the worker process then shuts down.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kathikon import conf, storage
from kathikon.exceptions import NodeSuperseded
from kathikon.runtime.service import PeriodicService

logger = logging.getLogger("kathikon.runtime")


class Heartbeat(PeriodicService):
    """Stamp this node's ``heartbeat_at`` every ``interval`` seconds.

    Options: ``interval`` (default ``HEARTBEAT_INTERVAL``; also the longest wait
    after a failure), ``rescue_after``
    (default ``RESCUE_AFTER``, for the late-heartbeat warning), ``hostname``,
    ``pid`` and ``queues`` (to re-create a missing node row), ``clock`` (tests:
    stamp this time instead of the database clock), ``instance`` (the process's
    token: only a row it still holds is stamped) and ``on_superseded`` (called
    once, with the error, when another process has taken the name over).
    """

    name = "heartbeat"

    def __init__(self, node: str, *, rescue_after: float | None = None, hostname: str = "",
                 pid: int | None = None, queues: Mapping[str, int] | None = None,
                 instance: str = "",
                 on_superseded: Callable[[NodeSuperseded], None] | None = None,
                 **options: Any) -> None:
        super().__init__(node, **options)
        if "max_backoff" not in options:
            # No long back-off: once the database is back, beat at once (the lifelines
            # elsewhere hold back two intervals after an outage, counting on that).
            self.max_backoff = self.interval
        self.rescue_after = conf.rescue_after() if rescue_after is None else rescue_after
        self.hostname, self.pid, self.queues = hostname, pid, dict(queues or {})
        self.instance, self.on_superseded = instance, on_superseded
        self.superseded: NodeSuperseded | None = None
        self._last_beat: float | None = None

    def default_interval(self) -> float:
        return conf.heartbeat_interval()

    def run_once(self) -> bool:
        """Write one heartbeat; returns False when the row had to be re-created (or was
        taken over by another process)."""
        if self.superseded is not None:
            return False
        at = self.now() if self.clock_injected else None  # None: the database clock
        beat = time.monotonic()
        if self._last_beat is not None and beat - self._last_beat > self.rescue_after:
            logger.warning("kathikon node %s was silent for %.0fs (RESCUE_AFTER is %.0fs): "
                           "its jobs may have been rescued elsewhere", self.node,
                           beat - self._last_beat, self.rescue_after)
        try:
            existed = storage.heartbeat(self.node, at=at, instance=self.instance, create={
                "hostname": self.hostname, "pid": self.pid, "queues": self.queues})
        except NodeSuperseded as superseded:
            logger.error("kathikon node %s: %s; stopping", self.node, superseded)
            self.superseded = superseded
            if self.on_superseded is not None:
                self.on_superseded(superseded)
            return False
        if not existed:
            logger.warning("kathikon node %s had no node row; wrote it again", self.node)
        self._last_beat = beat
        return existed
