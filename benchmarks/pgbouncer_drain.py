"""Drains behind PgBouncer in transaction mode against drains straight to PostgreSQL,
in the same run (issue 23).

The same N no-op jobs each time, drained by one ``kathikon_worker`` whose ``default``
alias goes either to PostgreSQL or through a PgBouncer of the benchmark's own
(tests/pgbouncer.py: transaction mode, ``POOL_SIZE`` server connections), listening
on a direct connection. Alternated direct, pooled, pooled, direct, so load drifting on
a shared machine hits both alike. PostgreSQL only.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from benchmarks import dbs
from benchmarks.drains import drain, fill, order

ORDER = tuple(order(2, ("direct", "pgbouncer")))  # direct, pgbouncer, pgbouncer, direct
POOL_SIZE = 10  # server connections: as many as the worker's default concurrency


def phase_pgbouncer(size: dict[str, Any], progress: Any, log_dir: Path,
                    **_: Any) -> dict[str, Any]:
    from django.db import connection

    from tests.pgbouncer import PgBouncer, binary

    if connection.vendor != "postgresql":
        return {"skipped": "PgBouncer fronts PostgreSQL only"}
    if binary() is None:
        progress("pgbouncer: skipped (pgbouncer is not installed)", final=True)
        return {"skipped": "pgbouncer is not installed"}
    n = size["drain"]
    runs: dict[str, list[dict[str, Any]]] = {"direct": [], "pgbouncer": []}
    bouncer = PgBouncer(pool_size=POOL_SIZE).start()
    try:
        for kind in ORDER:
            dbs.reset()
            fill(n, size["fill_call"])
            dbs.settle_table()
            env = bouncer.worker_env() if kind == "pgbouncer" else None
            runs[kind].append(drain(n, 1, size, progress, log_dir, f"pgbouncer {kind}: drain",
                                     prefilled=True, env=env))
    finally:
        bouncer.stop()
    dbs.reset()
    out: dict[str, Any] = {"n": n, "pool_size": POOL_SIZE}
    for kind, done in runs.items():
        out[kind] = {"rate": statistics.median(run["rate"] for run in done), "runs": done}
    direct, pooled = out["direct"]["rate"], out["pgbouncer"]["rate"]
    out["ratio"] = pooled / direct if pooled and direct else None
    progress(f"pgbouncer: drain {pooled:,.0f} jobs/s behind PgBouncer vs {direct:,.0f} direct"
             if out["ratio"] is not None else "pgbouncer: no rate measured", final=True)
    return out
