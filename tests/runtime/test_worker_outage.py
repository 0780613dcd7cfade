"""A database outage under a running worker: every connection drops and reconnects are
refused for a while (what a PostgreSQL or MariaDB restart looks like to a client)."""

from __future__ import annotations

import signal
import time

import pytest
from django.db import connection

import kathikon
from kathikon.models import Job
from tests.tcp_proxy import Proxy

from .conftest import wait_until
from .test_worker_process import FAST, RECORD, executions_per_job

pytestmark = pytest.mark.slow


def test_worker_rides_out_a_database_outage(worker_processes, vendor):
    if vendor == "sqlite":
        pytest.skip("SQLite has no server to lose")
    settings = connection.settings_dict
    upstream = (settings["HOST"] or "127.0.0.1", int(settings["PORT"]))
    port_variable = "KATHIKON_PG_PORT" if vendor == "postgresql" else "KATHIKON_MYSQL_PORT"
    bouncer = worker_processes.route.get("KATHIKON_PG_BOUNCER_PORT")
    if bouncer:  # behind PgBouncer: the outage is between the worker and its pooler
        upstream, port_variable = ("127.0.0.1", int(bouncer)), "KATHIKON_PG_BOUNCER_PORT"
    proxy = Proxy(upstream).start()
    try:
        count = 200
        kathikon.insert_many([(RECORD, {"sleep": 0.01}) for _ in range(count)])
        worker = worker_processes.start("--queues", "default:5", "--node", "outage",
                                        settings=FAST, env={port_variable: str(proxy.port)})
        wait_until(lambda: len(executions_per_job()) >= 40, 20, message="progress")
        proxy.stop()  # the "restart": connections drop, reconnects are refused
        time.sleep(2)
        proxy.start()
        wait_until(lambda: Job.objects.filter(state="completed").count() == count, 40,
                   message="every job completed after the outage")
        assert len(executions_per_job()) == count
        worker.signal(signal.SIGTERM)
        assert worker.wait(15) == 0, worker.log()
        assert "retrying" in worker.log()
    finally:
        worker_processes.cleanup()
        proxy.stop()
    if vendor == "postgresql" and not bouncer:  # let the proxied sessions end before the
        # test DB is dropped (PgBouncer keeps its server connections until it stops)
        wait_until(_alone, 10, message="the proxied sessions to end")


def _alone() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                       " AND pid <> pg_backend_pid()")
        return not cursor.fetchall()
