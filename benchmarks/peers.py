"""Turn a shared peer-harness run into ``benchmarks/peers.md`` (included in docs/benchmarks.md).

    python -m benchmarks.peers /tmp/kbench/runs/<timestamp>  [--out benchmarks/peers.md]

The harness itself (``../shared/bench``) is not part of this repository: copy it,
``KATHIKON_SRC=<checkout> ./setup_venv.sh``, then
``./run_peers.sh --only kathikon,procrastinate,djtasks --skip-pgbench``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ORDER = ["kathikon", "procrastinate", "procrastinate-c10", "djtasks", "djq"]


def _median_rate(runs: list[dict[str, Any]] | None) -> float | None:
    rates = [r["rate"] for r in runs or [] if r.get("rate")]
    return statistics.median(rates) if rates else None


def _drain(entry: dict[str, Any] | None) -> float | None:
    if not entry:
        return None
    return entry.get("steady_rate") or entry.get("wall_rate")


def _fmt(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def figures(peer: dict[str, Any]) -> dict[str, float | None]:
    latency = peer.get("latency") or {}
    return {"single": _median_rate(peer.get("single")), "bulk": _median_rate(peer.get("bulk")),
            "drain1": _drain(peer.get("drain1")), "drain2": _drain(peer.get("drain2")),
            "p50": latency.get("p50_ms"), "p95": latency.get("p95_ms"),
            "max": latency.get("max_ms")}


def render(run_dir: Path) -> str:
    data = json.loads((run_dir / "results.json").read_text())
    m, p = data["machine"], data["params"]
    peers = sorted(data["peers"], key=lambda k: ORDER.index(k) if k in ORDER else 99)
    rows = {key: figures(data["peers"][key]) for key in peers}
    lines = [
        "## Side by side with other Python job queues",
        "",
        f"The shared peer harness, run on {data['started']} UTC with Kathikon next to the",
        "peers, each with its documented worker and default settings (Django 6.1, one",
        "database per system, peers in rotating order within each phase):",
        "",
        f"- Machine: {m['nproc']} vCPU {m['cpu']}, {m['mem_gib']} GiB RAM; PostgreSQL "
        f"{m['postgres']} (shared_buffers={m['shared_buffers']}, synchronous_commit="
        f"{m['synchronous_commit']}, fsync={m['fsync']}), over the Unix socket; Python "
        f"{m['python']}",
        f"- Single enqueue N={p['n_single']:,} x{p['reps']} (median), bulk N={p['n_bulk']:,} "
        f"x{p['reps']}, drain N={p['n_drain']:,} no-op jobs (steady state, start-up "
        f"excluded), pickup latency {p['n_latency']} jobs {p['latency_interval_ms']} ms apart "
        "on an idle worker (the job records `time.time()` when it starts)",
        "",
        "| system | version | enqueue/s single | enqueue/s bulk | drain jobs/s, 1 process "
        "| drain jobs/s, 2 processes | pickup latency p50 / p95 / max ms |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for key in peers:
        r, peer = rows[key], data["peers"][key]
        versions = (peer.get("versions") or {}).get("versions", {})
        version = ", ".join(f"{k} {v}" for k, v in versions.items() if v and k != "psycopg")
        name = peer.get("cfg", {}).get("name", key)
        lines.append(f"| {'**' + name + '**' if key == 'kathikon' else name} | {version} | "
                     f"{_fmt(r['single'])} | {_fmt(r['bulk'])} | {_fmt(r['drain1'])} | "
                     f"{_fmt(r['drain2'])} | {_fmt(r['p50'], 1)} / {_fmt(r['p95'], 1)} / "
                     f"{_fmt(r['max'], 1)} |")
    mine = rows.get("kathikon")
    others = [rows[k] for k in peers if k != "kathikon"]
    if mine and others:
        def best(name: str, low: bool = False) -> float | None:
            values = [o[name] for o in others if o[name] is not None]
            if not values:
                return None
            return min(values) if low else max(values)

        def times(name: str) -> str:
            b = best(name)
            return "n/a" if not b or mine[name] is None else f"{mine[name] / b:.1f}x"

        lines += [
            "",
            "Kathikon against the best peer in the same run: single enqueue "
            f"{times('single')}, bulk {times('bulk')}, drain {times('drain1')} (1 process) and "
            f"{times('drain2')} (2 processes); pickup latency p50 {_fmt(mine['p50'], 1)} ms vs "
            f"{_fmt(best('p50', low=True), 1)} ms, p95 {_fmt(mine['p95'], 1)} ms vs "
            f"{_fmt(best('p95', low=True), 1)} ms.",
        ]
    lines += [
        "",
        "The harness is not part of this repository (it installs the peers); the",
        "figures of `make bench` above come from Kathikon's own suite and are not",
        "directly comparable with this table (TCP instead of the Unix socket, other N).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers")
    parser.add_argument("run_dir", type=Path, help="a harness runs/<timestamp> directory")
    parser.add_argument("--out", type=Path, default=HERE / "peers.md")
    args = parser.parse_args(argv)
    text = render(args.run_dir)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
