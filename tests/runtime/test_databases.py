"""Queues on two databases, served by real ``kathikon_worker`` processes.

``reports`` lives in the test project's ``second`` database, ``default`` in
``DATABASE``. One worker command serves both (a process per database); a job is
only ever in its queue's database; after kill -9 each database's lifeline rescues
its own jobs; with the second database down the first one's queue keeps draining
and the outage is logged once, not once per poll.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest
from django.db import connection, connections

import kathikon
from kathikon.models import Job
from tests.runtime.lifeline_workers import SlowRecorded, executions
from tests.tcp_proxy import Proxy

from .conftest import wait_until
from .test_worker_process import FAST, RECORD, executions_per_job

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True,
                                                      databases=["default", "second"])]
SETTINGS = {**FAST, "QUEUES": {"default": {"concurrency": 5},
                               "reports": {"concurrency": 5, "database": "second"}}}


@pytest.fixture
def second_env() -> dict[str, str]:
    """How a worker process reaches the test run's ``second`` database."""
    return {"KATHIKON_SECOND_DB_NAME": str(connections["second"].settings_dict["NAME"])}


def states(alias: str) -> dict[str, str]:
    return {pk.hex: state for pk, state in Job.objects.using(alias).values_list("id", "state")}


def insert_both(count: int, **args: Any) -> tuple[list[str], list[str]]:
    from django.test import override_settings

    with override_settings(KATHIKON=SETTINGS):
        here = kathikon.insert_many([(RECORD, {"i": i, **args}) for i in range(count)])
        there = kathikon.insert_many([(RECORD, {"i": i, **args}, {"queue": "reports"})
                                      for i in range(count)])
    return here.ids, there.ids


def test_one_worker_drains_both_databases_each_job_in_its_own(worker_processes, second_env):
    here, there = insert_both(100)
    worker = worker_processes.start("--node", "both", settings=SETTINGS, env=second_env)
    wait_until(lambda: len(executions_per_job()) == 200, 30, message="200 jobs ran")
    wait_until(lambda: set(states("default").values()) == {"completed"}
               and set(states("second").values()) == {"completed"}, 15,
               message="every job completed")
    assert set(states("default")) == set(here)  # none crossed over
    assert set(states("second")) == set(there)
    assert all(n == 1 for n in executions_per_job().values())
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.log()
    log = worker.log()
    assert "(alias default)" in log and "(alias second)" in log, log


def test_kill_9_then_restart_rescues_each_job_on_its_database(worker_processes, second_env,
                                                              tmp_path):
    from django.test import override_settings

    log = tmp_path / "runs.log"
    settings = {**SETTINGS, "RESCUE_AFTER": 2, "HEARTBEAT_INTERVAL": 0.5}
    with override_settings(KATHIKON=settings):
        slow = [kathikon.insert(SlowRecorded, {"log": str(log), "seconds": 1.0},
                                queue=queue) for queue in ("default", "reports")]
    first = worker_processes.start("--node", "doomed", settings=settings, env=second_env)
    wait_until(lambda: sum(row[3] == "start" for row in executions(log)) == 2, 20,
               message="both jobs started")
    first.kill()  # supervisor and both children, mid-job
    worker_processes.start("--node", "heir", settings=settings, env=second_env)
    wait_until(lambda: states("default").get(slow[0].id.hex) == "completed"
               and states("second").get(slow[1].id.hex) == "completed", 40,
               message="both jobs rescued and completed")
    assert list(states("default")) == [slow[0].id.hex]
    assert list(states("second")) == [slow[1].id.hex]
    for job, alias in zip(slow, ("default", "second"), strict=True):
        row = Job.objects.using(alias).get(pk=job.id)
        assert row.attempted_by.startswith("heir"), row  # rescued, then run by the heir
        runs = [r[3] for r in executions(log) if r[0] == job.id.hex]
        assert runs == ["start", "start", "end"]  # killed once, then run once to its end


def test_second_database_down_first_keeps_draining_outage_logged_once(worker_processes,
                                                                      second_env, vendor):
    if vendor == "sqlite":
        pytest.skip("SQLite has no server to lose")
    second = connections["second"].settings_dict
    proxy = Proxy((second["HOST"] or "127.0.0.1", int(second["PORT"]))).start()
    try:
        worker = worker_processes.start(
            "--node", "split", settings=SETTINGS,
            env={**second_env, "KATHIKON_SECOND_DB_PORT": str(proxy.port)})
        wait_until(lambda: worker.log().count("(alias ") >= 2, 20, message="both started")
        before = len(worker.log())
        proxy.stop()  # the second database goes away and refuses reconnects
        wait_until(lambda: "database 'second' unavailable" in worker.log()[before:], 10,
                   message="the outage said")
        time.sleep(0.5)  # a line another thread was writing as the outage became known
        known = len(worker.log())  # each part that failed before it was known said so once
        here, _ = insert_both(50)
        wait_until(lambda: all(states("default").get(pk) == "completed" for pk in here), 20,
                   message="the first database's jobs completed during the outage")
        time.sleep(3.0)  # ~15 polls of the second database's dispatcher meanwhile
        said = [line for line in worker.log()[before:].splitlines()
                if "database 'second' unavailable" in line]
        assert len(said) == 1, worker.log()[before:]
        assert worker.log()[known:] == "", worker.log()[before:]  # nothing per poll after
        proxy.start()
        wait_until(lambda: set(states("second").values()) == {"completed"}, 30,
                   message="the second database's jobs completed after it came back")
        assert "database 'second' is back after" in worker.log()
        worker.signal(signal.SIGTERM)
        assert worker.wait(20) == 0, worker.log()
    finally:
        worker_processes.cleanup()
        proxy.stop()
    if vendor == "postgresql":
        wait_until(lambda: _alone(connections["second"]), 10, message="proxied sessions ended")


def _alone(wrapper: Any = connection) -> bool:
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                       " AND pid <> pg_backend_pid()")
        return not cursor.fetchall()
