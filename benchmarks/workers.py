"""The jobs the benchmarks run: a no-op, and one that records its pickup latency."""

from __future__ import annotations

import os
import time

import kathikon


class NoopWorker(kathikon.Worker):
    def perform(self, job):
        return None


class LatencyWorker(kathikon.Worker):
    """Appends ``seq latency_seconds`` to ``$BENCH_LAT_FILE`` at the start of ``perform``.

    ``args["t"]`` is ``time.time()`` taken just before the enqueue call, like the
    shared peer harness does.
    """

    def perform(self, job):
        started = time.time()
        with open(os.environ["BENCH_LAT_FILE"], "a") as out:
            out.write(f"{job.args['seq']} {started - job.args['t']:.6f}\n")
