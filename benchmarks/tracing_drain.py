"""What tracing costs: drains with ``KATHIKON["TRACING"]`` on and off, in the same run.

The same N no-op jobs each time, inserted with tracing as the drain has it (on: each
carries the trace context of its insert), drained by one ``kathikon_worker`` that on
the traced turns runs the OpenTelemetry SDK (benchmarks.tracing_sdk: a batch span
processor, an exporter that drops the spans). Alternated off, on, on, off, so load
drifting on a shared machine hits both alike. The overhead per job is the difference
of the seconds per job, and of the worker's CPU per job.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from benchmarks import dbs, tracing_sdk
from benchmarks.drains import drain, fill, order

ORDER = tuple(order(2, ("off", "on")))  # off, on, on, off


def phase_tracing(size: dict[str, Any], progress: Any, log_dir: Path,
                  **_: Any) -> dict[str, Any]:
    from django.test import override_settings

    if not tracing_sdk.available():
        progress("tracing: skipped (opentelemetry-sdk is not installed)", final=True)
        return {"skipped": "opentelemetry-sdk is not installed"}
    tracing_sdk.install()  # this process's inserts make send spans when tracing is on
    n = size["drain"]
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for kind in ORDER:
        dbs.reset()
        with override_settings(KATHIKON={"TRACING": kind == "on"}):
            fill(n, size["fill_call"])
        dbs.settle_table()
        runs[kind].append(drain(n, 1, size, progress, log_dir, f"tracing {kind}: drain",
                                 prefilled=True,
                                 env={"BENCH_TRACING": "1"} if kind == "on" else None))
    dbs.reset()
    out: dict[str, Any] = {"n": n}
    for kind, done in runs.items():
        out[kind] = {"rate": statistics.median(run["rate"] for run in done), "runs": done}
        cpu = [run["worker_cpu_us_per_job"] for run in done if "worker_cpu_us_per_job" in run]
        if cpu:
            out[kind]["worker_cpu_us_per_job"] = statistics.median(cpu)
    off, on = out["off"]["rate"], out["on"]["rate"]
    out["overhead_us_per_job"] = (1 / on - 1 / off) * 1e6 if on and off else None
    if "worker_cpu_us_per_job" in out["on"] and "worker_cpu_us_per_job" in out["off"]:
        out["worker_cpu_overhead_us_per_job"] = (out["on"]["worker_cpu_us_per_job"]
                                                 - out["off"]["worker_cpu_us_per_job"])
    cpu_text = ""
    if "worker_cpu_overhead_us_per_job" in out:
        cpu_text = f", worker CPU {out['worker_cpu_overhead_us_per_job']:+.0f} us/job"
    overhead = out["overhead_us_per_job"]
    progress(f"tracing: drain on {on:,.0f} jobs/s vs off {off:,.0f} "
             f"({overhead:+.0f} us/job{cpu_text})" if overhead is not None else
             "tracing: no rate measured", final=True)
    return out
