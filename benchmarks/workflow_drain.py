"""A fan-out/fan-in workflow drained against as many plain jobs, in the same run.

The workflow: 1 root step → N-2 steps that each wait for the root → 1 final step
that waits for all of them (N steps, the no-op worker of the plain drains). The
plain side: N no-op jobs. Each is inserted in one transaction while warm
``kathikon_worker`` processes (default settings) wait idle, and timed from that
commit to the last completion (for the workflow: the final step's, with the
workflow ``completed``). The two kinds alternate (P W W P …) with the same
processes, so load drifting on a shared machine hits both alike.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks import dbs
from benchmarks.drains import order
from benchmarks.procs import Workers, tree_cpu_seconds

KINDS = ("plain", "workflow")
POLL = 0.02  # seconds between "done yet?" probes (the times come from the rows, not the poll)
#: where a workflow drain's time goes (``_timings``): the root's pickup and run, the fan-out's
#: release, the middle steps, the fan-in's release and run
PHASES = ("root_s", "release_s", "middle_s", "fan_in_s")
_PENDING = ("available", "scheduled", "claimed", "running", "retryable", "waiting", "held")


def fan_out_fan_in(n: int) -> Any:
    """The unsaved workflow: ``root`` → ``s1`` … ``s<n-2>`` → ``final`` (``n`` ≥ 3 steps)."""
    import kathikon
    from benchmarks.workers import NoopWorker

    if n < 3:
        raise ValueError(f"a fan-out/fan-in workflow needs at least 3 steps, not {n}")
    wf = kathikon.Workflow("bench-fan-out-fan-in")
    wf.add("root", NoopWorker, {"i": 0})
    middle = [wf.add(f"s{i}", NoopWorker, {"i": i}, deps=["root"]) for i in range(1, n - 1)]
    wf.add("final", NoopWorker, {"i": n - 1}, deps=middle)
    return wf


def ratio(plain: float | None, workflow: float | None) -> float | None:
    """The workflow's rate as a share of the plain jobs' (``None`` when either is missing)."""
    if not plain or workflow is None:
        return None
    return workflow / plain


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Median rate of each kind over its runs, and the ratio workflow / plain."""
    out: dict[str, Any] = {}
    for kind, done in runs.items():
        rates = [run["rate"] for run in done]
        out[kind] = {"rate": statistics.median(rates) if rates else None, "rates": rates,
                     "timed_out": any(run["timed_out"] for run in done), "runs": done}
        for key in ("worker_cpu_us_per_job", "db_cpu_us_per_job", "seconds", *PHASES):
            values = [run[key] for run in done if run.get(key) is not None]
            if values:
                out[kind][key] = statistics.median(values)
    out["ratio"] = ratio(out.get("plain", {}).get("rate"), out.get("workflow", {}).get("rate"))
    return out


def phase_workflow(size: dict[str, Any], progress: Any, log_dir: Path,
                   kinds: tuple[str, ...] | None = None, **_: Any) -> dict[str, Any]:
    """For 1, 2 … ``workflow_processes`` worker processes: the workflow and the plain jobs,
    alternated."""
    import kathikon

    n = size["workflow"]
    if kinds is None:  # a checkout from before workflows measures its plain jobs only
        kinds = KINDS if hasattr(kathikon, "Workflow") else ("plain",)
    out: dict[str, Any] = {"n": n, "kinds": list(kinds)}
    for procs in range(1, size["workflow_processes"] + 1):
        runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
        with Workers(procs, log_dir) as workers:
            _warm_up(workers, procs, size["drain_timeout"])
            for kind in order(2 * size["workflow_rounds"], kinds):  # rounds of A B B A
                runs[kind].append(_measure(kind, n, workers, size["drain_timeout"], progress,
                                           f"{kind} {n:,}, {procs} proc"))
        out[f"p{procs}"] = summary = summarise(runs)
        text = ", ".join(f"{kind} {summary[kind]['rate']:,.0f}" for kind in kinds)
        if summary["ratio"] is not None:
            text += f"; workflow at {summary['ratio']:.0%} of plain ({_where(summary)})"
        progress(f"workflow drain, {procs} proc (median jobs/s): {text}", final=True)
    _reset()
    return out


def _where(summary: dict[str, Any]) -> str:
    """Where the time went, as medians: the workflow's phases against the plain drain."""
    workflow, plain = summary["workflow"], summary["plain"]
    parts = [f"{name.removesuffix('_s').replace('_', '-')} {workflow[name]:.2f} s"
             for name in PHASES if name in workflow]
    if "seconds" in plain:
        parts.append(f"plain jobs {plain['seconds']:.2f} s")
    return ", ".join(parts)


# -- one drain ------------------------------------------------------------------------------

def _measure(kind: str, n: int, workers: Workers, timeout: float, progress: Any,
             label: str) -> dict[str, Any]:
    _reset()
    dbs.settle_table()
    built = fan_out_fan_in(n) if kind == "workflow" else None  # built before the clock starts
    inserting = time.perf_counter()
    committed = _insert(kind, n, built)
    insert_seconds = time.perf_counter() - inserting
    workflow_id = built.id if built is not None else None
    cpu0 = (tree_cpu_seconds(workers.pids), dbs.backend_cpu())
    deadline = time.monotonic() + timeout
    done = False
    while not done and time.monotonic() < deadline:
        time.sleep(POLL)
        workers.check_alive()
        done = _finished(workflow_id)
        progress(f"{label}: {time.time() - committed:.1f} s")
    cpu1 = (tree_cpu_seconds(workers.pids), dbs.backend_cpu())
    result = _timings(kind, n, committed, workflow_id)
    result.update(insert_seconds=insert_seconds, timed_out=not done)
    if not done:
        result["left"] = _left(workflow_id)
    if result["completed"]:
        result["worker_cpu_us_per_job"] = (cpu1[0] - cpu0[0]) / result["completed"] * 1e6
        if dbs.vendor_of_connection() == "postgres":
            result["db_cpu_us_per_job"] = (cpu1[1] - cpu0[1]) / result["completed"] * 1e6
    progress(f"{label}: {result['rate']:,.0f} jobs/s from commit to last completion "
             f"({result['completed']:,}/{n:,} in {result['seconds']:.2f} s"
             f"{'' if done else ', TIMED OUT, left ' + str(result['left'])}; "
             f"insert {insert_seconds:.2f} s)", final=True)
    return result


def _warm_up(workers: Workers, procs: int, timeout: float) -> None:
    """Wait until every process has registered and drained a few jobs, then is idle again:
    the measured drains start from warm, waiting processes (no start-up in the figures)."""
    import kathikon
    from benchmarks.workers import NoopWorker

    _reset()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers.check_alive()
        live = dbs.execute("SELECT count(*) FROM kathikon_node WHERE status = 'running'")
        if live[0][0] >= procs:
            break
        time.sleep(0.1)
    kathikon.insert_many([(NoopWorker, {"i": i}) for i in range(200 * procs)])
    while not _finished(None) and time.monotonic() < deadline:
        workers.check_alive()
        time.sleep(POLL)
    time.sleep(0.5)


def _insert(kind: str, n: int, built: Any) -> float:
    """Insert in one transaction; returns ``time.time()`` just after its commit."""
    from django.db import transaction

    import kathikon
    from benchmarks.workers import NoopWorker

    with transaction.atomic():  # the signals and bookkeeping inside, the clock starts after
        if kind == "workflow":
            built.insert()
        else:
            kathikon.insert_many([(NoopWorker, {"i": i}) for i in range(n)], chunk_size=5000)
    return time.time()


def _finished(workflow_id: Any) -> bool:
    if workflow_id is not None:
        from kathikon.models import Workflow

        status = Workflow.objects.filter(pk=workflow_id).values_list("status", flat=True)
        return status.first() not in (None, "running")
    placeholders = ", ".join(["%s"] * len(_PENDING))
    rows = dbs.execute(f"SELECT 1 FROM kathikon_job WHERE state IN ({placeholders}) LIMIT 1",
                       list(_PENDING))
    return not rows


def _timings(kind: str, n: int, committed: float, workflow_id: Any) -> dict[str, Any]:
    """The rate from the commit to the last completion, and (workflow) where the time went."""
    from django.db.models import Count, Max, Min

    from kathikon.models import Job

    done = Job.objects.filter(state="completed").aggregate(
        count=Count("id"), first=Min("completed_at"), last=Max("completed_at"))
    count, first, last = done["count"], _epoch(done["first"]), _epoch(done["last"])
    out: dict[str, Any] = {"kind": kind, "n": n, "completed": count}
    if workflow_id is not None:
        from kathikon.models import Workflow

        steps = Job.objects.filter(workflow_id=workflow_id)
        ends = dict(steps.filter(step__in=["root", "final"]).values_list("step", "completed_at"))
        middle = steps.exclude(step__in=["root", "final"]).aggregate(
            first=Min("completed_at"), last=Max("completed_at"))
        out["status"] = Workflow.objects.filter(pk=workflow_id).values_list(
            "status", flat=True).first()
        root, final = _epoch(ends.get("root")), _epoch(ends.get("final"))
        first_mid, last_mid = _epoch(middle["first"]), _epoch(middle["last"])
        spans = ((committed, root), (root, first_mid), (first_mid, last_mid), (last_mid, final))
        for name, (start, end) in zip(PHASES, spans, strict=True):
            if start is not None and end is not None:
                out[name] = end - start
        last = final  # the clock stops at the final step, whatever else completed
    end = last if last is not None else time.time()
    out["seconds"] = max(end - committed, 1e-9)
    out["rate"] = count / out["seconds"]
    steady = last - first if last is not None and first is not None else 0.0
    out["steady_rate"] = (count - 1) / steady if count > 1 and steady > 0 else None
    return out


def _left(workflow_id: Any) -> dict[str, Any]:
    """What a drain that timed out left behind: jobs by state and, for a workflow, where its
    root and final step are (a root that never completes stalls everything)."""
    from django.db.models import Count

    from kathikon.models import Job

    left: dict[str, Any] = {"states": dict(Job.objects.order_by().values_list("state")
                                           .annotate(n=Count("id")))}
    if workflow_id is not None:
        for step in Job.objects.filter(workflow_id=workflow_id, step__in=["root", "final"]):
            left[step.step] = {"state": step.state, "attempts": step.attempts,
                               "node": step.attempted_by, "deps_waiting": step.deps_waiting,
                               "error": (step.errors or [{}])[-1].get("message", "")[:300]}
    return left


def _epoch(value: Any) -> float | None:
    """A ``completed_at`` as seconds since the epoch."""
    return None if value is None else value.timestamp()


def _reset() -> None:
    """Empty the job tables and, where this checkout has them, the workflow tables."""
    from django.db import connection

    dbs.reset()
    tables = [table for table in ("kathikon_workflowdep", "kathikon_workflowstep",
                                  "kathikon_workflow")
              if table in connection.introspection.table_names()]
    if tables and dbs.vendor_of_connection() == "postgres":
        dbs.execute(f"TRUNCATE {', '.join(tables)}")
    for table in tables if dbs.vendor_of_connection() != "postgres" else ():
        dbs.execute(f"DELETE FROM {table}")
