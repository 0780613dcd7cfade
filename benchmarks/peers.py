"""Kathikon side by side with the fastest Python PostgreSQL queues, through the shared harness.

    python -m benchmarks --only peers                 # part of `make bench`
    python -m benchmarks.peers run [--quick] [--peers a,b] [--baseline DIR]
    python -m benchmarks.peers render <harness run dir> [--out benchmarks/peers.md]

The harness (``../shared/bench``, or ``KATHIKON_PEER_HARNESS``) is not part of this
repository: it is copied into a cache directory named after its version (a hash of
its driver, adapters and lock files), where its ``setup_venv.sh`` installs the
peers' pinned versions, and this checkout's Kathikon, once. ``--baseline DIR`` adds
``kathikon-base``: the same adapter importing Kathikon from another checkout
(an A/B of two commits in one run).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import stat
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_HARNESS = ROOT.parent / "shared" / "bench"
# The fastest peers, each at its default and tuned; the Django peers; chancy's default
# ProcessExecutor is left out (≈150 jobs/s: its 20k drain hits the 120 s cut-off).
DEFAULT_PEERS = ["kathikon", "kathikon-c100", "pgqueuer", "pgqueuer-b100", "oban", "oban-l100",
                 "chancy-async", "procrastinate", "djtasks"]
ORDER = ["kathikon", "kathikon-c100", "kathikon-base", "kathikon-base-c100", "pgqueuer",
         "pgqueuer-b100", "oban", "oban-l100", "chancy", "chancy-async", "procrastinate",
         "procrastinate-c10", "djtasks", "djq"]
MINE = {"kathikon", "kathikon-c100", "kathikon-base", "kathikon-base-c100"}
TUNED = {"kathikon-c100", "kathikon-base-c100", "pgqueuer-b100", "oban-l100", "chancy-async",
         "procrastinate-c10"}
SETTINGS = {
    "kathikon": "`kathikon_worker`, default settings (queue `default`, concurrency 10)",
    "kathikon-c100": "`kathikon_worker --queues default:100`",
    "kathikon-base": "the baseline commit, default settings",
    "kathikon-base-c100": "the baseline commit, `--queues default:100`",
    "pgqueuer": "`pgq run`, default `--batch-size 10`, no `--max-concurrent-tasks`",
    "pgqueuer-b100": "`pgq run --batch-size 100`",
    "oban": "`oban start --queues default:10` (docs example)",
    "oban-l100": "`oban start --queues default:100`",
    "chancy": "default queue, ProcessExecutor, `eager_polling=True`",
    "chancy-async": "AsyncExecutor (concurrency 100), `eager_polling=True`",
    "procrastinate": "`procrastinate worker`, default concurrency 1",
    "procrastinate-c10": "`procrastinate worker --concurrency 10`",
    "djtasks": "`manage.py db_worker`, defaults",
    "djq": "`manage.py qcluster`, defaults",
}


# --- the harness ----------------------------------------------------------------------------

def harness_source() -> Path | None:
    path = Path(os.environ.get("KATHIKON_PEER_HARNESS", DEFAULT_HARNESS))
    return path if (path / "bench.py").exists() else None


def harness_version(source: Path) -> str:
    """A short hash of what decides the figures: driver, harness, adapters, pinned versions."""
    digest = hashlib.sha256()
    files = [source / "bench.py", *sorted(source.glob("requirements*.txt")),
             *sorted((source / "harness").rglob("*.py")),
             *sorted(p for p in (source / "adapters").rglob("*")
                     if p.is_file() and p.suffix in (".py", ".json"))]
    for path in files:
        digest.update(str(path.relative_to(source)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kathikon-bench"


def restore_symlinks(harness: Path) -> None:
    """Variant adapters share files through relative symlinks (``benchapp -> ../pgqueuer/…``);
    a copy that flattened them holds the link text instead: make those links again."""
    for path in (harness / "adapters").glob("*/*"):
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 200:
            continue
        text = path.read_text(errors="replace").strip()
        if text.startswith("../") and "\n" not in text and (path.parent / text).exists():
            path.unlink()
            path.symlink_to(text)


def prepare(source: Path) -> Path:
    """A writable copy of the harness with its venvs, built once per harness version."""
    version = harness_version(source)
    target = _cache_root() / f"harness-{version}"
    stamp = target / ".kathikon-ready"
    if not stamp.exists():
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(source, target, symlinks=True,
                        ignore=shutil.ignore_patterns("runs", ".venv*", "__pycache__"))
        for path in [target, *target.rglob("*")]:
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | stat.S_IWUSR)
        sys.stderr.write(f"[peers] installing the harness {version} into {target} (once)\n")
        subprocess.run(["./setup_venv.sh"], cwd=target, check=True,
                       env={**os.environ, "KATHIKON_SRC": str(ROOT)})
        stamp.write_text(str(ROOT))
    elif stamp.read_text() != str(ROOT):  # another checkout: point the editable install here
        subprocess.run([str(target / ".venv/bin/pip"), "install", "-q", "-e", str(ROOT)],
                       check=True)
        stamp.write_text(str(ROOT))
    restore_symlinks(target)
    return target


def add_baseline(harness: Path, checkout: Path) -> list[str]:
    """Adapters ``kathikon-base`` (+ ``-c100``): Kathikon imported from ``checkout`` instead."""
    keys = []
    for key in ("kathikon", "kathikon-c100"):
        src = harness / "adapters" / key
        dest = harness / "adapters" / key.replace("kathikon", "kathikon-base")
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(src, dest)  # real files: settings.py is rewritten below
        cfg = json.loads((src / "adapter.json").read_text())
        cfg["name"] = cfg["name"].replace("kathikon", "kathikon (baseline)", 1)
        cfg["db"] = cfg["db"] + "_base"
        cfg["env"] = {**cfg.get("env", {}), "PYTHONPATH": f"${{PYTHONPATH}}:{checkout}"}
        (dest / "adapter.json").write_text(json.dumps(cfg, indent=2))
        settings = (dest / "settings.py").read_text().replace(f'"{cfg["db"][:-5]}"',
                                                             f'"{cfg["db"]}"')
        (dest / "settings.py").write_text(settings)
        keys.append(dest.name)
    return keys


def run(peers: list[str], *, quick: bool = False, baseline: Path | None = None,
        extra: list[str] | None = None) -> tuple[Path, str]:
    """Run the harness on ``peers``; returns (its run directory, the harness version)."""
    source = harness_source()
    if source is None:
        raise FileNotFoundError(f"peer harness not found at {DEFAULT_HARNESS} "
                                "(set KATHIKON_PEER_HARNESS)")
    harness = prepare(source)
    if baseline is not None:
        peers = [*peers, *add_baseline(harness, baseline.resolve())]
    run_dir = harness / "runs" / f"kathikon-{os.getpid()}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    argv = ["./run_peers.sh", "--only", ",".join(peers), "--out", str(run_dir),
            "--pgbench-clients", "1,2", *(["--quick"] if quick else []), *(extra or [])]
    subprocess.run(argv, cwd=harness, check=True, stdout=subprocess.DEVNULL)
    return run_dir, harness_version(source)


# --- the report -------------------------------------------------------------------------------

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


def _ratio(a: float | None, b: float | None) -> str:
    return "n/a" if not a or not b else f"{a / b:.2f}x"


def targets(rows: dict[str, dict[str, float | None]],
            pgbench: dict[str, Any] | None) -> list[str]:
    """Issue 12's ratios, from one run."""
    mine, tuned = rows.get("kathikon"), rows.get("kathikon-c100")
    defaults = {k: r for k, r in rows.items() if k not in MINE and k not in TUNED}
    others = {k: r for k, r in rows.items() if k not in MINE}
    if not mine or not others:
        return []

    def best(pool: dict[str, dict[str, float | None]], name: str,
             low: bool = False) -> tuple[str, float | None]:
        values = [(k, r[name]) for k, r in pool.items() if r[name] is not None]
        if not values:
            return "n/a", None
        return (min if low else max)(values, key=lambda kv: kv[1])  # type: ignore[arg-type]

    out = []
    for procs in ("drain1", "drain2"):
        key, value = best(defaults, procs)
        out.append(f"- defaults drain, {procs[-1]} process(es): kathikon {_fmt(mine[procs])} vs "
                   f"{key} {_fmt(value)} = **{_ratio(mine[procs], value)}** (target ≥ 1.5x)")
    if tuned and "pgqueuer-b100" in rows:
        pgq = rows["pgqueuer-b100"]
        for procs in ("drain1", "drain2"):
            out.append(f"- tuned drain, {procs[-1]} process(es): kathikon `default:100` "
                       f"{_fmt(tuned[procs])} vs pgqueuer `--batch-size 100` {_fmt(pgq[procs])} "
                       f"= **{_ratio(tuned[procs], pgq[procs])}** (target ≥ 1x)")
    scale = _ratio(mine["drain2"], mine["drain1"])
    out.append(f"- 2 processes / 1 process at defaults: **{scale}** (target ≥ 1.3x)")
    key, value = best(others, "single")
    line = (f"- single `insert()` in autocommit: {_fmt(mine['single'])}/s vs {key} "
            f"{_fmt(value)}/s = **{_ratio(mine['single'], value)}** (target ≥ 1x)")
    one = next((r for r in (pgbench or {}).get("runs", [])
                if r["script"] == "update_one" and r["clients"] == 1), None)
    if one and mine["single"]:
        line += (f"; pgbench one-UPDATE-per-transaction at 1 client: {_fmt(one['tps'])} tps, "
                 f"so an insert costs {one['tps'] / mine['single']:.2f} of those")
    out.append(line)
    key, value = best(others, "bulk")
    out.append(f"- bulk `insert_many`: {_fmt(mine['bulk'])}/s vs {key} {_fmt(value)}/s = "
               f"**{_ratio(mine['bulk'], value)}** (target ≥ 1x)")
    key, value = best(others, "p50", low=True)
    out.append(f"- pickup p50: {_fmt(mine['p50'], 1)} ms vs {key} {_fmt(value, 1)} ms "
               f"(target ≤ best + 0.5 ms)")
    return out


def render(run_dir: Path, version: str | None = None, note: str | None = None) -> str:
    data = json.loads((run_dir / "results.json").read_text())
    m, p = data["machine"], data["params"]
    peers = sorted(data["peers"], key=lambda k: ORDER.index(k) if k in ORDER else 99)
    rows = {key: figures(data["peers"][key]) for key in peers}
    lines = [
        "## Side by side with other Python job queues",
        "",
        f"The shared peer harness{f' (version `{version}`)' if version else ''}, run on "
        f"{data['started']} UTC with Kathikon next to the peers, each with its documented",
        "worker, at its default and tuned (one database per system, peers in rotating order",
        "within each phase; `python -m benchmarks --only peers`):",
        "",
        f"- Machine: {m['nproc']} vCPU {m.get('cpu', '')}, {m.get('mem_gib')} GiB RAM; "
        f"PostgreSQL {m['postgres']} (shared_buffers={m['shared_buffers']}, synchronous_commit="
        f"{m['synchronous_commit']}, fsync={m['fsync']}), over the Unix socket; Python "
        f"{m['python']}",
        f"- Single enqueue N={p['n_single']:,} x{p['reps']} (median), bulk N={p['n_bulk']:,} "
        f"x{p['reps']}, drain N={p['n_drain']:,} no-op jobs (steady state, start-up "
        f"excluded), pickup latency {p['n_latency']} jobs {p['latency_interval_ms']} ms apart "
        "on an idle worker (the job records `time.time()` when it starts)",
    ]
    if note:
        lines += [f"- {note}"]
    lines += [
        "",
        "| system | settings | version | enqueue/s single | enqueue/s bulk | drain jobs/s, "
        "1 process | drain jobs/s, 2 processes | pickup latency p50 / p95 / max ms |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for key in peers:
        r, peer = rows[key], data["peers"][key]
        versions = (peer.get("versions") or {}).get("versions", {})
        version_text = ", ".join(f"{k} {v}" for k, v in versions.items()
                                 if v and k not in ("psycopg",))
        name = peer.get("cfg", {}).get("name", key)
        lines.append(f"| {'**' + name + '**' if key in MINE else name} | "
                     f"{SETTINGS.get(key, '')} | {version_text} | "
                     f"{_fmt(r['single'])} | {_fmt(r['bulk'])} | {_fmt(r['drain1'])} | "
                     f"{_fmt(r['drain2'])} | {_fmt(r['p50'], 1)} / {_fmt(r['p95'], 1)} / "
                     f"{_fmt(r['max'], 1)} |")
    pgbench = data.get("pgbench")
    if pgbench:
        cells = ", ".join(f"{r['clients']} client(s) {_fmt(r['tps'])} tps"
                          for r in pgbench["runs"] if r["script"] == "update_one")
        lines += ["", f"pgbench, one single-row UPDATE per transaction (the physical limit of "
                      f"one commit per job here): {cells}."]
    ratios = targets(rows, pgbench)
    if ratios:
        lines += ["", "Issue 12's targets in this run (ratios; the absolute figures move with "
                      "the machine's load):", "", *ratios]
    lines += [
        "",
        "The harness is not part of this repository (it installs the peers); the",
        "figures of `make bench` above come from Kathikon's own suite and are not",
        "directly comparable with this table (TCP instead of the Unix socket, other N).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="run the harness, print and write the table")
    run_p.add_argument("--quick", action="store_true")
    run_p.add_argument("--peers", default=",".join(DEFAULT_PEERS))
    run_p.add_argument("--baseline", type=Path, help="another checkout, as kathikon-base")
    run_p.add_argument("--note", default=None)
    run_p.add_argument("--out", type=Path, default=None,
                       help="write the table here (default: benchmarks/peers.md unless --quick)")
    run_p.add_argument("harness_args", nargs="*", help="passed to the harness (after --)")
    render_p = sub.add_parser("render", help="render a harness run directory")
    render_p.add_argument("run_dir", type=Path)
    render_p.add_argument("--version", default=None)
    render_p.add_argument("--note", default=None)
    render_p.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.command == "run":
        run_dir, version = run([p for p in args.peers.split(",") if p], quick=args.quick,
                               baseline=args.baseline, extra=args.harness_args)
        text = render(run_dir, version, args.note)
        out = args.out or (None if args.quick else HERE / "peers.md")
        sys.stderr.write(f"[peers] raw results: {run_dir}\n")
    else:
        text = render(args.run_dir, args.version, args.note)
        out = args.out
    if out:
        out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
