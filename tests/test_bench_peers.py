"""benchmarks.peers: the shared harness copy is usable and its run renders issue 12's ratios."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import peers


def _peer(single, bulk, d1, d2, p50, name):
    return {"cfg": {"name": name}, "versions": {"versions": {name: "1.0"}},
            "single": [{"rate": single}], "bulk": [{"rate": bulk}] if bulk else [],
            "drain1": {"steady_rate": d1}, "drain2": {"steady_rate": d2},
            "latency": {"p50_ms": p50, "p95_ms": p50 * 2, "max_ms": p50 * 3}}


def test_render_compares_defaults_with_defaults_and_tuned_with_tuned(tmp_path: Path):
    data = {"started": "2026-12-01 12:00:00", "params": {
        "n_single": 5000, "n_bulk": 20000, "n_drain": 20000, "n_latency": 100,
        "latency_interval_ms": 50, "reps": 3},
        "machine": {"nproc": 2, "cpu": "x", "mem_gib": 1, "postgres": "15", "shared_buffers": "1",
                    "synchronous_commit": "on", "fsync": "on", "python": "3.13"},
        "peers": {"kathikon": _peer(3000, 40000, 9000, 12000, 3.0, "kathikon"),
                  "kathikon-c100": _peer(3000, 40000, 14000, 16000, 3.0, "kathikon c100"),
                  "pgqueuer": _peer(3400, 30000, 4500, 5000, 3.2, "pgqueuer"),
                  "pgqueuer-b100": _peer(3300, 31000, 13000, 10000, 3.1, "pgqueuer b100")},
        "pgbench": {"runs": [{"script": "update_one", "clients": 1, "tps": 3300}]}}
    (tmp_path / "results.json").write_text(json.dumps(data))
    text = peers.render(tmp_path, "abc123")
    assert "version `abc123`" in text
    # defaults against the best default (pgqueuer, not its tuned variant)
    assert "kathikon 9,000 vs pgqueuer 4,500 = **2.00x**" in text
    assert "kathikon 12,000 vs pgqueuer 5,000 = **2.40x**" in text
    assert "`default:100` 14,000 vs pgqueuer `--batch-size 100` 13,000 = **1.08x**" in text
    assert "2 processes / 1 process at defaults: **1.33x**" in text
    # single insert against the best of every peer, and against pgbench's commit rate
    assert "3,000/s vs pgqueuer 3,400/s = **0.88x**" in text
    assert "so an insert costs 1.10 of those" in text


def test_flattened_variant_links_become_symlinks_again(tmp_path: Path):
    base = tmp_path / "adapters" / "pgqueuer"
    variant = tmp_path / "adapters" / "pgqueuer-b100"
    (base / "benchapp").mkdir(parents=True)
    (base / "bench_adapter.py").write_text("X = 1\n")
    variant.mkdir()
    (variant / "bench_adapter.py").write_text("../pgqueuer/bench_adapter.py")
    (variant / "benchapp").write_text("../pgqueuer/benchapp")
    (variant / "adapter.json").write_text("{}")
    peers.restore_symlinks(tmp_path)
    assert (variant / "bench_adapter.py").is_symlink()
    assert (variant / "bench_adapter.py").read_text() == "X = 1\n"
    assert (variant / "benchapp").is_symlink() and (variant / "benchapp").is_dir()
    assert not (variant / "adapter.json").is_symlink()


def test_mariadb_side_by_side_renders_both_systems_and_the_ratio():
    from benchmarks import mariadb_peer

    text = mariadb_peer.render({
        "started": "2026-12-01T12:00:00+00:00", "n": 10_000,
        "kathikon": {"single": 900.0, "drain1": 2400.0, "drain2": 3000.0,
                     "server": {"version": "10.11", "innodb_flush_log_at_trx_commit": "1",
                                "innodb_buffer_pool_size": str(128 * 2**20)}},
        "djtasks": {"version": "django-tasks-db 0.13.0, Django 6.1.3", "single": 800.0,
                    "drain1": 100.0, "drain2": 200.0}})
    assert "| **kathikon** |" in text and "| django-tasks-db 0.13.0 |" in text
    assert "buffer pool 128 MiB" in text
    assert "drain 24.0x (1 process), 15.0x (2 processes)" in text
