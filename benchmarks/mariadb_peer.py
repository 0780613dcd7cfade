"""Kathikon and django-tasks-db side by side on MariaDB (the shared harness is PostgreSQL-only).

    python -m benchmarks --only mariadb-peer        # part of `make bench`
    python -m benchmarks.mariadb_peer [--n 10000] [--out benchmarks/mariadb_peers.md]

django-tasks-db runs from the shared harness's venv (its pinned version; mysqlclient is
added to that venv once) with the harness's own ``djtasks`` task module, only the
database changed: its documented worker (``manage.py db_worker``), 1 and 2 processes.
Kathikon's figures come from ``benchmarks.runner`` on the same server in the same run.
Both drain no-op jobs enqueued one per transaction first; the rate is the steady state
(first to last finish), as everywhere in ``make bench``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import dbs, peers
from benchmarks.procs import ROOT, worker_env

HERE = Path(__file__).resolve().parent
DB_NAME = "kathikon_bench_djtasks"
TABLE = "django_tasks_database_dbtaskresult"

_SETTINGS = """
import os
SECRET_KEY = "bench"
USE_TZ = True
INSTALLED_APPS = ["django_tasks_db", "benchapp"]
DATABASES = {"default": {
    "ENGINE": "django.db.backends.mysql", "NAME": %(name)r,
    "HOST": os.environ.get("KATHIKON_MYSQL_HOST", "127.0.0.1"),
    "PORT": os.environ.get("KATHIKON_MYSQL_PORT", "3306"),
    "USER": os.environ.get("KATHIKON_MYSQL_USER", "root"),
    "PASSWORD": os.environ.get("KATHIKON_MYSQL_PASSWORD", ""),
    "CONN_MAX_AGE": 600, "OPTIONS": {"charset": "utf8mb4"}}}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}}
"""

_ENQUEUE = """
import sys, time, django
django.setup()
from benchapp.tasks import noop
n = int(sys.argv[1])
started = time.perf_counter()
for i in range(n):
    noop.enqueue(i)
print(n / (time.perf_counter() - started))
"""


def _sql(query: str) -> list[tuple[Any, ...]]:
    conn = dbs.mysql_connection()
    try:
        conn.select_db(DB_NAME)
        cursor = conn.cursor()
        cursor.execute(query)
        rows = list(cursor.fetchall())
        conn.commit()
        return rows
    finally:
        conn.close()


class DjangoTasksDb:
    """django-tasks-db on MariaDB, run from the harness venv."""

    def __init__(self, harness: Path, work: Path) -> None:
        self.python = str(harness / ".venv" / "bin" / "python")
        self.work = work
        (work / "djt_settings.py").write_text(_SETTINGS % {"name": DB_NAME})
        self.env = {**os.environ, "DJANGO_SETTINGS_MODULE": "djt_settings",
                    "PYTHONPATH": os.pathsep.join([str(work), str(harness / "harness"),
                                                   str(harness / "adapters" / "djtasks")]),
                    "PYTHONWARNINGS": "ignore"}
        self.env.pop("BENCH_LAT_FILE", None)

    def ensure_driver(self) -> None:
        probe = subprocess.run([self.python, "-c", "import MySQLdb"], capture_output=True)
        if probe.returncode != 0:
            sys.stderr.write("[mariadb-peer] installing mysqlclient into the harness venv\n")
            subprocess.run([self.python, "-m", "pip", "install", "-q", "mysqlclient"],
                           check=True)

    def version(self) -> str:
        out = subprocess.run([self.python, "-c", "import importlib.metadata as m; "
                              "print(m.version('django-tasks-db'), m.version('Django'))"],
                             capture_output=True, text=True, check=True).stdout.split()
        return f"django-tasks-db {out[0]}, Django {out[1]}"

    def setup(self) -> None:
        subprocess.run([self.python, "-m", "django", "migrate", "-v", "0"], cwd=self.work,
                       env=self.env, check=True)

    def enqueue(self, n: int) -> float:
        _sql(f"TRUNCATE TABLE {TABLE}")
        out = subprocess.run([self.python, "-c", _ENQUEUE, str(n)], cwd=self.work,
                             env=self.env, capture_output=True, text=True, check=True)
        return float(out.stdout.strip().splitlines()[-1])

    def drain(self, n: int, procs: int, timeout: float) -> dict[str, Any]:
        self.enqueue(n)
        _sql(f"ANALYZE TABLE {TABLE}")
        workers = [subprocess.Popen([self.python, "-m", "django", "db_worker"], cwd=self.work,
                                    env=self.env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
                   for _ in range(procs)]
        started = time.monotonic()
        try:
            remaining = n
            while remaining and time.monotonic() - started < timeout:
                time.sleep(0.25)
                remaining = int(_sql(f"SELECT count(*) FROM {TABLE} "
                                     "WHERE status IN ('READY', 'RUNNING')")[0][0])
        finally:
            for proc in workers:
                proc.terminate()
            for proc in workers:
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, 9)
        count, first, last = _sql(f"SELECT count(*), min(finished_at), max(finished_at) "
                                  f"FROM {TABLE} WHERE status = 'SUCCESSFUL'")[0]
        span = (last - first).total_seconds() if count and first and last else 0.0
        return {"n": n, "completed": int(count), "timed_out": remaining > 0,
                "rate": (count - 1) / span if span > 0 else 0.0}


def kathikon_figures(n: int) -> dict[str, Any]:
    """Kathikon on the same server: single inserts and 1/2-process drains (benchmarks.runner)."""
    with tempfile.TemporaryDirectory(prefix="kathikon-mariadb-") as tmp:
        out = Path(tmp) / "k.json"
        subprocess.run([sys.executable, "-m", "benchmarks.runner", "--db", "mariadb",
                        "--only", "enqueue,drain", "--json", str(out), "--log-dir", tmp,
                        "--size", f"drain={n}", "--size", "single=2000"],
                       cwd=ROOT, env=worker_env(), check=True)
        data = json.loads(out.read_text())
    phases = data["phases"]
    return {"single": phases["enqueue"]["rate"], "drain1": phases["drain"]["p1"]["rate"],
            "drain2": phases["drain"]["p2"]["rate"], "server": data.get("server", {})}


def run(n: int = 10_000, timeout: float = 120.0) -> dict[str, Any]:
    source = peers.harness_source()
    if source is None:
        raise FileNotFoundError(f"peer harness not found at {peers.DEFAULT_HARNESS}")
    harness = peers.prepare(source)
    with tempfile.TemporaryDirectory(prefix="kathikon-djt-") as tmp:
        djt = DjangoTasksDb(harness, Path(tmp))
        djt.ensure_driver()
        os.environ["BENCH_DB_NAME"] = DB_NAME
        try:
            dbs.create("mariadb")
            djt.setup()
            sys.stderr.write("[mariadb-peer] django-tasks-db: enqueue, drain 1 and 2 processes\n")
            result = {"started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                      "n": n, "djtasks": {"version": djt.version(), "single": djt.enqueue(2000),
                                          "drain1": djt.drain(n, 1, timeout)["rate"],
                                          "drain2": djt.drain(n, 2, timeout)["rate"]}}
        finally:
            dbs.drop("mariadb")
            os.environ.pop("BENCH_DB_NAME", None)
    sys.stderr.write("[mariadb-peer] kathikon on the same server\n")
    result["kathikon"] = kathikon_figures(n)
    return result


def render(result: dict[str, Any]) -> str:
    k, d = result["kathikon"], result["djtasks"]
    server = k.get("server", {})

    def row(name: str, settings: str, r: dict[str, Any]) -> str:
        return (f"| {name} | {settings} | {r['single']:,.0f} | {r['drain1']:,.0f} | "
                f"{r['drain2']:,.0f} |")

    ratio = [f"{k[key] / d[key]:.1f}x" if d[key] else "n/a" for key in ("drain1", "drain2")]
    return "\n".join([
        "## Side by side on MariaDB",
        "",
        f"Run on {result['started']}: MariaDB {server.get('version', '?')} "
        f"(innodb_flush_log_at_trx_commit={server.get('innodb_flush_log_at_trx_commit', '?')},"
        f" buffer pool {int(server.get('innodb_buffer_pool_size', 0)) // 2**20} MiB), "
        f"{result['n']:,} no-op jobs enqueued one per transaction, then drained by 1 and by 2 "
        "worker processes (steady state). `python -m benchmarks --only mariadb-peer`.",
        "",
        "| system | settings | enqueue/s single | drain jobs/s, 1 process | "
        "drain jobs/s, 2 processes |",
        "|---|---|---:|---:|---:|",
        row("**kathikon**", "`kathikon_worker`, default settings (polling: no NOTIFY on "
            "MariaDB)", k),
        row(d["version"].split(",")[0], f"`manage.py db_worker`, defaults ({d['version']})", d),
        "",
        f"Kathikon against django-tasks-db: drain {ratio[0]} (1 process), {ratio[1]} "
        "(2 processes).",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mariadb_peer",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=HERE / "mariadb_peers.md")
    args = parser.parse_args(argv)
    text = render(run(args.n))
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
