"""The summary table, the targets, and ``docs/benchmarks.md``."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.dbs import LABELS, VENDORS

HERE = Path(__file__).resolve().parent

# Targets a run can check on its own. The ones against other job queues are ratios taken in
# one side-by-side run of the shared harness: ``peers.targets`` (the section below this table).
# name, goal, the value from a vendor's results, and the test the value must pass
TARGETS: list[tuple[str, str, Callable[[dict[str, Any]], Any], Callable[[Any], bool]]] = [
    ("pickup latency p95", "≤ 10 ms (an idle worker)", lambda r: _get(r, "latency", "p95"),
     lambda v: v <= 10),
    ("large backlog drain", "≥ 80% of the small-backlog rate (1M vs 10k)", lambda r: _ratio(r),
     lambda v: v >= 0.8),
    ("claim plan", "walks the partial index kathikon_job_claim (no sort)",
     lambda r: _get(r, "backlog", "explain", "uses_claim_index"), bool),
    ("worker memory", "RSS grows < 10% over the drained jobs",
     lambda r: _get(r, "backlog", "large", "rss_growth"), lambda v: v < 0.10),
    ("unique insert cost", "≤ 1.5x a plain insert (same run)",
     lambda r: _get(r, "flow", "unique_cost"), lambda v: v <= 1.5),
    ("drain, unreached global_limit", "≥ 80% of an unlimited drain (same run)",
     lambda r: _get(r, "flow", "limited_ratio"), lambda v: v >= 0.8),
    ("workflow drain", "≥ 70% of the rate of as many plain jobs (fan-out/fan-in, same run, "
     "1 worker)", lambda r: _get(r, "workflow", "p1", "ratio"), lambda v: v >= 0.7),
]


def _get(results: dict[str, Any], *keys: str) -> Any:
    value: Any = results.get("phases", {})
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _ratio(results: dict[str, Any]) -> float | None:
    small, large = _get(results, "backlog", "small", "rate"), _get(results, "backlog", "large",
                                                                     "rate")
    if not small or large is None:
        return None
    return large / small


def _rate(value: Any) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _count(value: Any) -> str:
    if value is None:
        return "?"
    if value >= 1_000_000 and value % 1_000_000 == 0:
        return f"{value // 1_000_000}M"
    if value >= 1000 and value % 1000 == 0:
        return f"{value // 1000}k"
    return f"{value:,}"


def machine() -> dict[str, str]:
    cpu, cores = "unknown CPU", os.cpu_count() or 0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                                capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    python = platform.python_version()
    return {"cpu": cpu, "cores": str(cores), "memory": memory, "kernel": platform.release(),
            "python": python, "commit": commit or "?",
            "summary": f"{cores} x {cpu}, {memory} RAM, Python {python}"}


def _cell(results: dict[str, Any] | None, fn: Callable[[dict[str, Any]], str]) -> str:
    if results is None:
        return "skipped"
    try:
        return fn(results)
    except (TypeError, KeyError, ZeroDivisionError):
        return "-"


def _measured(name: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if name in ("large backlog drain", "drain, unreached global_limit", "workflow drain"):
        return f"{value:.0%}"
    if name == "unique insert cost":
        return f"{value:.2f}x"
    if name == "worker memory":
        return f"{value:+.1%}"
    if "latency" in name:
        return f"{value:.1f} ms"
    return f"{value:,.0f}/s"


def _rss(r: dict[str, Any]) -> str:
    large = _get(r, "backlog", "large")
    if not large or not large.get("rss_warm_kib"):
        return "-"
    growth = large.get("rss_growth")
    return (f"{large['rss_warm_kib'] / 1024:.1f} → {large['rss_final_kib'] / 1024:.1f} MiB "
            f"({growth:+.1%} over {_count(large.get('completed'))} jobs)")


def _cores(r: dict[str, Any]) -> str:
    """Cores busy in each drain, and what that leaves a second process.

    With one process already keeping ``c1`` of ``n`` cores busy (itself and the
    database, on one machine), two cannot drain more than ``n / c1`` times as fast.
    """
    one, two = _get(r, "drain", "p1", "cores_busy"), _get(r, "drain", "p2", "cores_busy")
    cores = _get(r, "drain", "p1", "cores")
    if one is None or two is None or cores is None:
        return "-"
    return (f"{one:.2f} / {two:.2f} of {cores}: 2 processes can reach at most "
            f"{cores / one:.2f}x of 1 here")


def _workflow(procs: int) -> Callable[[dict[str, Any]], str]:
    """The workflow drain's cell: workflow vs plain jobs/s (medians) and their ratio."""

    def cell(r: dict[str, Any]) -> str:
        result = _get(r, "workflow", f"p{procs}")
        if not result or result.get("ratio") is None:
            return "-"
        late = [kind for kind in ("workflow", "plain") if result[kind].get("timed_out")]
        return (f"{_rate(result['workflow']['rate'])} vs {_rate(result['plain']['rate'])} "
                f"({result['ratio']:.0%}, N={_count(_get(r, 'workflow', 'n'))})"
                + "".join(f" {kind} TIMED OUT" for kind in late))

    return cell


def _tracing(r: dict[str, Any]) -> str:
    """The tracing phase's cell: the traced drain against the untraced one, and the cost."""
    result = _get(r, "tracing")
    if not result or result.get("overhead_us_per_job") is None:
        return "-"
    cpu = result.get("worker_cpu_overhead_us_per_job")
    return (f"{_rate(result['on']['rate'])} vs {_rate(result['off']['rate'])} "
            f"({result['overhead_us_per_job']:+.0f} us/job"
            + (f", worker CPU {cpu:+.0f} us/job" if cpu is not None else "") + ")")


def _pgbouncer(r: dict[str, Any]) -> str:
    """The pgbouncer phase's cell: the drain behind PgBouncer against the direct one."""
    result = _get(r, "pgbouncer")
    if not result or result.get("ratio") is None:
        return "-"
    return (f"{_rate(result['pgbouncer']['rate'])} vs {_rate(result['direct']['rate'])} "
            f"({result['ratio']:.0%}, pool {result['pool_size']})")


def _partitioned(what: str) -> Callable[[dict[str, Any]], str]:
    """The partitioned phase's cells: the drain and claims beside a big history against
    an empty table, the drop of a day, and the churn's dead tuples against the plain
    table's."""

    def cell(r: dict[str, Any]) -> str:
        result = _get(r, "partitioned")
        if not result or "partitioned_history" not in result:
            return "-"
        full, empty = result["partitioned_history"], result["partitioned_empty"]
        if what == "drain":
            plain = result["plain_empty"]["rate"]
            return (f"{_rate(full['rate'])} vs {_rate(empty['rate'])} empty "
                    f"({result['drain_ratio']:.0%}; plain empty {_rate(plain)})")
        if what == "claim":
            text = (f"{full['claim_ms_median']:.2f} vs {empty['claim_ms_median']:.2f} ms "
                    f"({result['claim_ratio']:.2f}x")
            if result.get("claim_work_paired_ratio") is not None:  # runs from 2026-12-07 on
                text += (f"; paired {result['claim_paired_ratio']:.2f}x, without the commit's "
                         f"flush {result['claim_work_paired_ratio']:.2f}x")
            return text + ")"
        if what == "prune":
            return f"{_count(result['prune']['rows'])} jobs in {result['prune']['seconds']:.3f} s"
        if "churn_plain" not in result:
            return "-"
        parted, plain = result["churn_partitioned"], result["churn_plain"]
        return (f"{_count(parted['dead_tuples'])} / {parted['bytes'] / 2**20:,.0f} MB vs "
                f"{_count(plain['dead_tuples'])} / {plain['bytes'] / 2**20:,.0f} MB plain "
                f"({result['churn_seconds']} s)")

    return cell


ROWS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("insert, 1 job per transaction (jobs/s)",
     lambda r: f"{_rate(_get(r, 'enqueue', 'rate'))} (N={_count(_get(r, 'enqueue', 'n'))})"),
    ("insert_many, one call (jobs/s)",
     lambda r: f"{_rate(_get(r, 'bulk', 'rate'))} (N={_count(_get(r, 'bulk', 'n'))})"),
    ("storage loop: claim 10 → run → 1 ack, in-process (jobs/s)",
     lambda r: f"{_rate(_get(r, 'storage', 'rate'))} (N={_count(_get(r, 'storage', 'n'))})"),
    ("drain, 1 `kathikon_worker` (jobs/s)",
     lambda r: f"{_rate(_get(r, 'drain', 'p1', 'rate'))} (N={_count(_get(r, 'drain', 'p1', 'n'))})"
     + (" TIMED OUT" if _get(r, "drain", "p1", "timed_out") else "")),
    ("drain, 2 `kathikon_worker` (jobs/s)",
     lambda r: f"{_rate(_get(r, 'drain', 'p2', 'rate'))} (N={_count(_get(r, 'drain', 'p2', 'n'))})"
     + (" TIMED OUT" if _get(r, "drain", "p2", "timed_out") else "")),
    ("CPU per job in the 1-process drain: worker / database server (µs)",
     lambda r: "-" if _get(r, "drain", "p1", "worker_cpu_us_per_job") is None else
     f"{_get(r, 'drain', 'p1', 'worker_cpu_us_per_job'):,.0f} / "
     + ("n/a" if _get(r, "drain", "p1", "db_cpu_us_per_job") is None
        else f"{_get(r, 'drain', 'p1', 'db_cpu_us_per_job'):,.0f}")),
    ("cores busy during the drain, 1 / 2 processes (of the machine's)", _cores),
    ("pickup latency, idle worker, p50 / p95 / max (ms)",
     lambda r: f"{_ms(_get(r, 'latency', 'p50'))} / {_ms(_get(r, 'latency', 'p95'))} / "
               f"{_ms(_get(r, 'latency', 'max'))} (N={_get(r, 'latency', 'n')})"),
    ("drain with a small backlog, 1 worker (jobs/s)",
     lambda r: f"{_rate(_get(r, 'backlog', 'small', 'rate'))} "
               f"({_count(_get(r, 'backlog', 'small', 'n'))} queued)"),
    ("drain with a large backlog, 1 worker (jobs/s)",
     lambda r: f"{_rate(_get(r, 'backlog', 'large', 'rate'))} "
               f"({_count(_get(r, 'backlog', 'large', 'n'))} queued, first "
               f"{_count(_get(r, 'backlog', 'large', 'completed'))} drained)"),
    ("large / small backlog rate",
     lambda r: "-" if _ratio(r) is None else f"{_ratio(r):.0%}"),
    ("claim walks kathikon_job_claim in order, no sort (EXPLAIN)",
     lambda r: {True: "yes", False: "NO", None: "-"}[_get(r, "backlog", "explain",
                                                          "uses_claim_index")]
     + ("" if _get(r, "backlog", "explain", "execution_ms") is None
        else f" ({_get(r, 'backlog', 'explain', 'execution_ms'):.2f} ms)")),
    ("worker RSS, warm → end", _rss),
    ("filling the large backlog with insert_many (jobs/s)",
     lambda r: _rate(_get(r, "backlog", "fill", "rate"))),
    ("flow: unique insert vs plain insert (jobs/s)",
     lambda r: "-" if _get(r, "flow", "unique_cost") is None else
     f"{_rate(_get(r, 'flow', 'insert_unique'))} vs {_rate(_get(r, 'flow', 'insert_plain'))}"
     f" ({_get(r, 'flow', 'unique_cost'):.2f}x)"),
    ("flow: drain with an unreached global_limit vs unlimited, 1 worker (jobs/s)",
     lambda r: "-" if _get(r, "flow", "limited_ratio") is None else
     f"{_rate(_get(r, 'flow', 'drain_global_limit', 'rate'))} vs "
     f"{_rate(_get(r, 'flow', 'drain_unlimited', 'rate'))} "
     f"({_get(r, 'flow', 'limited_ratio'):.0%})"),
    ("workflow: 1 → N-2 → 1 steps vs N plain jobs, 1 `kathikon_worker` (jobs/s)", _workflow(1)),
    ("workflow: 1 → N-2 → 1 steps vs N plain jobs, 2 `kathikon_worker` (jobs/s)", _workflow(2)),
    ("drain with `TRACING` on (OpenTelemetry SDK, spans dropped) vs off, 1 `kathikon_worker` "
     "(jobs/s)", _tracing),
    ("drain behind PgBouncer (transaction mode, direct LISTEN) vs straight to PostgreSQL, "
     "1 `kathikon_worker` (jobs/s)", _pgbouncer),
    ("partitioned table: drain beside the loaded history vs empty, 1 `kathikon_worker` "
     "(jobs/s)", _partitioned("drain")),
    ("partitioned table: claim of 10 beside the loaded history vs empty (median)",
     _partitioned("claim")),
    ("partitioned table: a day's partition dropped by the pruner", _partitioned("prune")),
    ("churn at full drain rate: dead tuples / size, partitioned vs plain",
     _partitioned("churn")),
]


def table(results: dict[str, Any]) -> str:
    vendors = [v for v in VENDORS if v in results["vendors"] or v in results.get("skipped", {})]
    head = "| | " + " | ".join(LABELS[v] for v in vendors) + " |"
    lines = [head, "|---|" + "---:|" * len(vendors)]
    for name, fn in ROWS:
        cells = [_cell(results["vendors"].get(v), fn) for v in vendors]
        if all(cell.startswith("-") for cell in cells):
            continue
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets(results: dict[str, Any]) -> str:
    pg = results["vendors"].get("postgres")
    if pg is None:
        return "(PostgreSQL was not run: the targets are PostgreSQL figures.)"
    lines = ["| target (PostgreSQL) | goal | measured | holds |", "|---|---|---:|---|"]
    for name, goal, value_of, passes in TARGETS:
        value = value_of(pg)
        holds = "not run" if value is None else ("yes" if passes(value) else "**no**")
        lines.append(f"| {name} | {goal} | {_measured(name, value)} | {holds} |")
    return "\n".join(lines)


def _servers(results: dict[str, Any]) -> list[str]:
    lines = []
    for vendor in VENDORS:
        r = results["vendors"].get(vendor)
        if r is None:
            if vendor in results.get("skipped", {}):
                lines.append(f"- {LABELS[vendor]}: skipped ({results['skipped'][vendor]})")
            continue
        server = r.get("server", {})
        rest = ", ".join(f"{k}={v}" for k, v in server.items() if k != "version")
        lines.append(f"- {LABELS[vendor]} {server.get('version', '?')}"
                     + (f" ({rest})" if rest else ""))
    return lines


def _errors(results: dict[str, Any]) -> list[str]:
    lines = []
    for vendor, r in results["vendors"].items():
        for name, text in (r.get("errors") or {}).items():
            lines.append(f"- {LABELS[vendor]} {name} FAILED: "
                         f"{text.strip().splitlines()[-1] if text.strip() else '?'}")
    return lines


def summary(results: dict[str, Any]) -> str:
    if not results["vendors"]:  # only phases that need no database ran (peers, say)
        return ""
    parts = [table(results), "", targets(results)]
    errors = _errors(results)
    if errors:
        parts += ["", *errors]
    return "\n".join(parts)


def document(results: dict[str, Any]) -> str:
    m = results["machine"]
    django = next((r.get("django") for r in results["vendors"].values() if r.get("django")), "?")
    pg = results["vendors"].get("postgres")
    sizes = []
    for vendor, r in results["vendors"].items():
        s = r.get("sizes", {})
        if s:
            sizes.append(f"- {LABELS[vendor]}: insert {s['single']:,} x{s['single_reps']}, "
                         f"insert_many {s['bulk']:,} x{s['bulk_reps']}, drain {s['drain']:,}, "
                         f"latency {s['latency']} jobs 50 ms apart, backlog "
                         f"{_count(s['backlog_small'])} vs {_count(s['backlog_large'])} "
                         f"(first {_count(s['backlog_window'])} drained, RSS sampled)"
                         + (f", workflow {s['workflow']:,} steps vs {s['workflow']:,} plain "
                            f"jobs x{2 * s['workflow_rounds']} each" if "workflow" in s else ""))
    out = [
        "# Benchmarks",
        "",
        "How fast Kathikon enqueues and drains jobs, how quickly an idle worker picks a new",
        "job up, and whether that holds with a million jobs queued. PostgreSQL is the",
        "primary target; MariaDB and SQLite run the same phases with smaller N.",
        "",
        "```sh",
        "make bench                 # full run, about 30 minutes; rewrites this page",
        "make bench-quick           # a few minutes, small N, prints only",
        ".venv/bin/python -m benchmarks --db postgres --only enqueue,drain",
        ".venv/bin/python -m benchmarks --only peers          # the side-by-side table",
        ".venv/bin/python -m benchmarks --only mariadb-peer   # django-tasks-db on MariaDB",
        "```",
        "",
        "The suite creates its own database (`kathikon_bench`) on each server, starts real",
        "`kathikon_worker` processes with default settings, and drops the database at the",
        "end. Benchmarks are not tests: nothing here fails a build. The side-by-side",
        "phases copy the shared peer harness (`../shared/bench`, or `KATHIKON_PEER_HARNESS`)",
        "into a cache and install its pinned peers there once.",
        "",
        f"## Latest run: {results['started'][:16].replace('T', ' ')} UTC"
        + (" (quick)" if results.get("quick") else ""),
        "",
        f"- Machine: {m['cores']} x {m['cpu']}, {m['memory']} RAM, Linux {m['kernel']}",
        f"- Python {m['python']}, Django {django}, Kathikon commit `{m['commit']}`",
        *_servers(results),
        "- Kathikon settings: defaults (`KATHIKON = {}`: queue `default`, concurrency 10, "
        "poll interval 1 s; LISTEN/NOTIFY on PostgreSQL)",
        f"- Wall time: {results.get('seconds', 0) / 60:.1f} min",
        "",
        *([f"> {results['note']}", ""] if results.get("note") else []),
        table(results),
        "",
        "Sizes (MariaDB and SQLite use a reduced set):",
        "",
        *sizes,
        "",
        "### Targets",
        "",
        "The targets a run checks on its own; those against other job queues are ratios taken "
        "in one",
        'side-by-side run ("Side by side with other Python job queues", below).',
        "",
        targets(results),
        "",
    ]
    errors = _errors(results)
    if errors:
        out += ["Failures in this run:", "", *errors, ""]
    out += [
        "### How each figure is measured",
        "",
        "- **insert**: `kathikon.insert(NoopWorker, {\"i\": i})` in a loop, autocommit, so one",
        "  transaction per job; median of the repetitions.",
        "- **insert_many**: one `kathikon.insert_many([...])` call with the default chunk size",
        "  (PostgreSQL: one `COPY` per chunk, plus one NOTIFY per queue).",
        "- **storage loop**: the claim → run → ack path alone, in the benchmark process:",
        "  `claim_jobs(limit=10)`, run the no-op, one fenced `ack_jobs` for the batch. It is",
        "  the ceiling for one worker process without the runtime around it.",
        "- **drain**: no-op jobs queued first (ANALYZE, CHECKPOINT), then 1 or 2",
        "  `manage.py kathikon_worker` processes start. The rate is the steady state: jobs",
        "  completed between the first and the last `completed_at`, start-up excluded",
        "  (as in the shared peer harness).",
        "- **pickup latency**: one idle worker (a sentinel job ran, then 1.5 s of quiet); jobs",
        "  enqueued 50 ms apart record `time.time()` when `perform` starts; latency = that",
        "  minus `time.time()` just before `insert`. On MariaDB and SQLite there is no",
        "  LISTEN/NOTIFY, so latency follows the poll interval (1 s by default).",
        "- **backlog**: the same 1-worker drain with a small and with a large table; with the",
        "  large one only the first jobs are drained (the rate is the steady state over",
        "  those). The claim query's plan is taken on the large table (PostgreSQL:",
        "  `EXPLAIN (ANALYZE, BUFFERS)` inside a rolled-back transaction).",
        "- **worker RSS**: VmRSS of the worker process (and any children) from",
        "  `/proc/<pid>/status` once a second during the large-backlog drain; growth is from",
        "  the first sample after 10% of the jobs to the last. On SQLite it rises while",
        "  SQLite's page caches fill (one per connection and thread); in a longer run (150k",
        "  jobs from a 200k table) it levelled off at about 82 MiB after 50k jobs and stayed",
        "  there, so that is a cache filling, not a leak.",
        "- **workflow**: a workflow of 1 root step → N-2 steps that each depend on the root",
        "  → 1 final step that depends on all of them (`kathikon.Workflow`, the no-op worker),",
        "  against N plain no-op jobs. Each is inserted in one transaction while warm",
        "  `kathikon_worker` processes wait idle, and timed from that commit to the last",
        "  `completed_at` (the final step's, with the workflow `completed`); the two kinds",
        "  alternate with the same processes (plain, workflow, workflow, plain, …) and each",
        "  figure is the median. The ratio is workflow / plain. On MariaDB and SQLite (no",
        "  LISTEN/NOTIFY) the root, the released steps and the final step can each wait for the",
        "  next poll (1 s by default), which their small N does not hide.",
        "",
    ]
    if pg and _get(pg, "backlog", "explain", "plan"):
        out += ["### The claim query's plan (PostgreSQL, large backlog)", "", "```text",
                _get(pg, "backlog", "explain", "plan"), "```", ""]
    admin = results.get("admin")
    if admin:
        out += ["### Admin pages with a large table", "",
                "From `benchmarks/admin_pages.py` (`python -m benchmarks --only admin`):", "",
                "```text", admin.get("output", "").rstrip(), "```", ""]
    for name in ("peers.md", "mariadb_peers.md", "optimisations.md"):
        path = HERE / name
        if path.exists():
            out += [path.read_text().rstrip(), ""]
    return "\n".join(out)


if __name__ == "__main__":  # re-render a saved --json file: report.py results.json [note]
    import json

    data = json.loads(Path(sys.argv[1]).read_text())
    if len(sys.argv) > 2:
        data["note"] = sys.argv[2]
    print(document(data))
