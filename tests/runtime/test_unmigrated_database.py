"""A real empty database (``migrate`` never run): the worker and insert say to migrate.

Each test points a subprocess (``kathikon_worker`` or ``manage.py shell``) at a
freshly created, empty database of the vendor under test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from kathikon.exceptions import NotMigrated
from tests.connections import another_session
from tests.runtime.conftest import MANAGE, ROOT, WorkerProcesses


@pytest.fixture
def empty_database(tmp_path: Path) -> Iterator[str]:
    """The name of a new, empty database on the server the tests use; dropped afterwards."""
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        yield str(tmp_path / "empty.sqlite3")
        return
    name = f"kathikon_empty_{uuid.uuid4().hex[:12]}"
    if connection.vendor == "postgresql":
        def run(sql: str) -> None:
            with another_session(dbname="postgres") as admin:
                admin.execute(sql)

        run(f'CREATE DATABASE "{name}"')
        try:
            yield name
        finally:
            run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        return
    import MySQLdb

    admin = MySQLdb.connect(host=settings["HOST"], port=int(settings["PORT"] or 3306),
                            user=settings["USER"], passwd=settings["PASSWORD"] or "")
    try:
        admin.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        yield name
    finally:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()


@pytest.mark.parametrize("args", [["--burst"], [], ["--processes", "2"]],
                         ids=["burst", "forever", "processes"])
def test_the_worker_says_to_migrate_and_exits_non_zero(worker_processes: Any,
                                                       empty_database: str, args: list[str]):
    worker = worker_processes.start(*args, env={"KATHIKON_DB_NAME": empty_database})
    code = worker.wait(timeout=60)
    output = worker.log()
    assert code == NotMigrated.exit_code, output
    assert "run `python manage.py migrate`" in output
    retries = [line for line in output.splitlines() if "retrying" in line]
    if connection.vendor == "sqlite":
        # Two processes opening one new SQLite file at once (each switching it to WAL) may
        # find it locked for a moment under load: the start-up's wait for the database,
        # not a retry of the missing schema.
        retries = [line for line in retries if "database is locked" not in line]
    assert not retries, output
    assert "restarting" not in output


INSERT_SCRIPT = """
import json
from django.db import connection, transaction
import kathikon
from tests import workers

seen = {}
try:
    kathikon.insert(workers.Succeed, {"n": 1})
except kathikon.NotMigrated as exc:
    seen["insert"] = str(exc)
try:
    kathikon.insert_many([(workers.Succeed, {"n": 2})])
except kathikon.NotMigrated as exc:
    seen["insert_many"] = str(exc)
try:
    kathikon.claim_available("default")
except kathikon.NotMigrated as exc:
    seen["claim_available"] = str(exc)
with transaction.atomic():  # insert_many runs in a savepoint: the caller's block goes on
    try:
        kathikon.insert_many([(workers.Succeed, {"n": 3})])
    except kathikon.NotMigrated:
        pass
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        seen["after_insert_many_in_atomic"] = cursor.fetchone()[0]
try:  # insert's one statement: PostgreSQL aborts the surrounding transaction (documented)
    with transaction.atomic():
        try:
            kathikon.insert(workers.Succeed, {"n": 4})
        except kathikon.NotMigrated:
            pass
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        seen["block_after_insert"] = "usable"
except Exception as exc:
    seen["block_after_insert"] = type(exc).__name__
print("SEEN " + json.dumps(seen))
"""


def seen_by(script: str, database: str, tmp_path: Path) -> dict[str, Any]:
    """Run ``script`` in ``manage.py shell`` against ``database``; what it printed as SEEN."""
    env = WorkerProcesses(tmp_path).environment(env={"KATHIKON_DB_NAME": database})
    done = subprocess.run([sys.executable, str(MANAGE), "shell", "-c", textwrap.dedent(script)],
                          env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("SEEN "))
    return json.loads(line[5:])


def test_insert_says_to_migrate(empty_database: str, tmp_path: Path):
    seen = seen_by(INSERT_SCRIPT, empty_database, tmp_path)
    assert set(seen) == {"insert", "insert_many", "claim_available",
                         "after_insert_many_in_atomic", "block_after_insert"}
    for key in ("insert", "insert_many", "claim_available"):
        assert "run `python manage.py migrate`" in seen[key]
        assert "kathikon_" in seen[key]  # the table it missed
    assert seen["after_insert_many_in_atomic"] == 1
    expected = "InternalError" if connection.vendor == "postgresql" else "usable"
    assert seen["block_after_insert"] == expected


OPS_SCRIPT = """
import json
from io import StringIO
from django.core.management import call_command
from django.core.management.base import CommandError

seen = {}
for args in (["summary"], ["summary", "--json"], ["jobs"], ["failures"], ["show", "f" * 32],
             ["retry", "f" * 32], ["cancel", "f" * 32], ["rerun", "f" * 32],
             ["pause", "default"], ["resume", "--all"], ["limits", "default", "--reset"],
             ["prune"]):
    try:
        call_command("kathikon_ops", *args, stdout=StringIO(), stderr=StringIO())
        seen[" ".join(args)] = "no error"
    except CommandError as exc:
        seen[" ".join(args)] = [exc.returncode, str(exc)]
print("SEEN " + json.dumps(seen))
"""


def test_every_ops_command_says_to_migrate(empty_database: str, tmp_path: Path):
    seen = seen_by(OPS_SCRIPT, empty_database, tmp_path)
    assert len(seen) == 12, seen
    for command, outcome in seen.items():
        assert outcome != "no error", command
        code, message = outcome
        assert code == NotMigrated.exit_code, (command, message)
        assert "run `python manage.py migrate`" in message, (command, message)
    env = WorkerProcesses(tmp_path).environment(env={"KATHIKON_DB_NAME": empty_database})
    summary = subprocess.run([sys.executable, str(MANAGE), "kathikon_ops", "summary"],
                             env=env, cwd=str(ROOT), capture_output=True, text=True,
                             timeout=120, check=False)
    assert summary.returncode == NotMigrated.exit_code, summary.stderr
    assert "run `python manage.py migrate`" in summary.stderr
    assert "Traceback" not in summary.stderr
