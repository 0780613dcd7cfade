"""Fixtures for whole-process runtime tests: real ``kathikon_worker`` processes.

``worker_processes`` starts ``python testproject/manage.py kathikon_worker ...``
subprocesses against the current pytest TEST database (the data a test
inserts must be committed, so these tests use ``transactional_db``, which the
fixture requests). Every process runs in its own process group; at teardown
each group is killed with SIGKILL (children of ``--processes`` included) and
the logs of a failed test are printed.

    def test_drain(worker_processes):
        kathikon.insert_many(...)
        worker = worker_processes.start("--burst", settings={"POLL_INTERVAL": 0.2})
        assert worker.wait(timeout=20) == 0
        assert "completed" in worker.log()

    workers = worker_processes.start_many(3, settings={...})  # three processes
    wait_until(lambda: kathikon.status(job_id)["state"] == "completed", timeout=10)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
MANAGE = ROOT / "testproject" / "manage.py"


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05,
               message: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy (returned); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def connection_lost() -> Exception:
    """What Django raises when the connection drops mid-write, as each driver reports it
    (SQLite: its writer lock instead; it has no connection to lose)."""
    from django.db import OperationalError

    cause: Exception
    if connection.vendor == "postgresql":
        import psycopg

        cause = psycopg.OperationalError("server closed the connection unexpectedly")
    elif connection.vendor == "mysql":
        import MySQLdb

        cause = MySQLdb.OperationalError(2013, "Lost connection to server during query")
    else:
        import sqlite3

        cause = sqlite3.OperationalError("database is locked")
    error = OperationalError(*cause.args)
    error.__cause__ = cause
    return error


class WorkerProcess:
    """One ``kathikon_worker`` subprocess (its own process group) and its log file."""

    def __init__(self, popen: subprocess.Popen[bytes], log_path: Path, args: list[str]) -> None:
        self.popen = popen
        self.log_path = log_path
        self.args = args

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def log(self) -> str:
        """Everything the process wrote so far (stdout and stderr, interleaved)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_for_log(self, text: str, timeout: float = 10.0) -> None:
        """Wait until ``text`` appears in the log (e.g. the start-up banner)."""
        def seen() -> bool:
            if text in self.log():
                return True
            if self.returncode is not None:
                raise AssertionError(f"worker exited ({self.returncode}) before logging "
                                     f"{text!r}:\n{self.log()}")
            return False

        wait_until(seen, timeout, message=f"{text!r} in the worker log")

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the process itself (not its group)."""
        if self.returncode is None:
            os.kill(self.pid, signum)

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the whole process group (supervisor and its children)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signum)

    def wait(self, timeout: float = 20.0) -> int:
        """Wait for the process to exit and return its exit code (fails after ``timeout``)."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker {self.pid} still running after {timeout}s:\n"
                                 f"{self.log()}") from None

    def kill(self) -> None:
        """SIGKILL the whole process group and reap the process."""
        self.signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)


class WorkerProcesses:
    """Starts ``kathikon_worker`` processes against the test database; kills them at teardown."""

    def __init__(self, tmp_path: Path, route: dict[str, str] | None = None) -> None:
        self.tmp_path = tmp_path
        self.started: list[WorkerProcess] = []
        self.route = dict(route or {})  # how workers reach the database (PgBouncer's lane)

    def environment(self, settings: dict[str, Any] | None = None,
                    env: dict[str, str] | None = None) -> dict[str, str]:
        from testproject.settings import DB

        environ = dict(os.environ)
        environ.update({
            "KATHIKON_DB": DB,
            "KATHIKON_DB_NAME": str(connection.settings_dict["NAME"]),
            "KATHIKON_SETTINGS_JSON": json.dumps(settings or {}),
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                         os.environ.get("PYTHONPATH")])),
        })
        environ.pop("DJANGO_SETTINGS_MODULE", None)  # manage.py sets testproject.settings
        environ.update(self.route)
        environ.update(env or {})
        return environ

    def start(self, *args: str, settings: dict[str, Any] | None = None,
              env: dict[str, str] | None = None) -> WorkerProcess:
        """Start ``manage.py kathikon_worker *args`` with ``settings`` merged into KATHIKON."""
        index = len(self.started)
        log_path = self.tmp_path / f"worker-{index}.log"
        command = [sys.executable, str(MANAGE), "kathikon_worker", *args]
        with log_path.open("wb") as log:
            popen = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=str(ROOT),
                                     env=self.environment(settings, env),
                                     start_new_session=True)
        process = WorkerProcess(popen, log_path, command)
        self.started.append(process)
        return process

    def start_many(self, count: int, *args: str, **options: Any) -> list[WorkerProcess]:
        """``count`` separate processes, each named ``--node w<i>`` unless ``--node`` is given."""
        processes = []
        for _ in range(count):
            extra = [] if "--node" in args else ["--node", f"w{len(self.started)}"]
            processes.append(self.start(*args, *extra, **options))
        return processes

    def wait_all(self, timeout: float = 20.0) -> list[int]:
        deadline = time.monotonic() + timeout
        return [p.wait(max(0.1, deadline - time.monotonic())) for p in self.started]

    def logs(self) -> str:
        return "\n".join(f"----- worker {p.pid}: {' '.join(p.args[2:])}\n{p.log()}"
                         for p in self.started)

    def cleanup(self) -> None:
        for process in self.started:
            process.kill()


@pytest.fixture
def worker_processes(transactional_db: Any, tmp_path: Path,
                     request: pytest.FixtureRequest) -> Iterator[WorkerProcesses]:
    """Start real worker processes against the test database; they are killed at teardown.

    With ``KATHIKON_TEST_WORKERS_VIA=pgbouncer`` (PostgreSQL) every worker reaches the
    database through the session's PgBouncer in transaction mode, listening directly."""
    route: dict[str, str] = {}
    if os.environ.get("KATHIKON_TEST_WORKERS_VIA") == "pgbouncer" \
            and connection.vendor == "postgresql":
        route = request.getfixturevalue("pgbouncer").worker_env()
    processes = WorkerProcesses(tmp_path, route)
    try:
        yield processes
    finally:
        processes.cleanup()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed and processes.started:
            sys.stderr.write(processes.logs()[-20000:])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]


def serve_pool(pool):
    """Yield ``pool`` (a fixture's body), then release every held poison job and shut the
    pool and its acker down."""
    from . import poison_workers as poison

    yield pool
    for key in list(poison.HELD):
        poison.HELD.pop(key).set()
    pool.abandon_running()
    pool.close()
    pool.acker.stop(5)
