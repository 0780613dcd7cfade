"""Behind PgBouncer in transaction mode: real worker processes, a web-like client process
and ``kathikon_ops``, with fewer server connections (2) than a worker has threads.

The runtime suite's other whole-process tests run behind it too in the test matrix's
``primary/pgbouncer`` run (``KATHIKON_TEST_WORKERS_VIA=pgbouncer``).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time

import pytest
from django.db import connection

import kathikon
from kathikon.models import Job, Queue
from testproject.demo.models import Execution

from .conftest import MANAGE, ROOT, wait_until
from .test_worker_process import complete_then_stop, executions_per_job, pickup_latencies

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("postgres_only")]

RECORD = "testproject.demo.workers.Record"
FAST = {"POLL_INTERVAL": 0.2, "SCHEDULER_INTERVAL": 0.2}
NO_LISTEN = "no LISTEN: database 'default' goes through a connection pooler"


def _database() -> str:
    return str(connection.settings_dict["NAME"])


def _listeners() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                       " AND query = 'LISTEN kathikon'")
        return int(cursor.fetchone()[0])


def _environment(bouncer, *, direct_listener: bool = True) -> dict[str, str]:
    environ = {key: value for key, value in os.environ.items()
               if key != "DJANGO_SETTINGS_MODULE"}
    environ.update(bouncer.worker_env(direct_listener=direct_listener))
    environ.update({"KATHIKON_DB": "postgres", "KATHIKON_DB_NAME": _database(),
                    "DJANGO_SETTINGS_MODULE": "testproject.settings",
                    "PYTHONPATH": str(ROOT)})
    return environ


def test_workers_behind_pgbouncer_run_every_job_once(worker_processes, pgbouncer):
    """Two processes of 10 threads each share PgBouncer's 2 server connections."""
    count = 2_000
    before = pgbouncer.transactions(_database())
    workers = worker_processes.start_many(2, settings=FAST, env=pgbouncer.worker_env())
    wait_until(lambda: sum(w.log().count("kathikon worker") for w in workers) == 2, 30,
               message="both workers' banners")
    result = kathikon.insert_many([(RECORD, {"n": i, "sleep": 0.05} if i < 40 else {"n": i})
                                   for i in range(count)])
    complete_then_stop(workers, count, 90)
    runs = executions_per_job()
    assert len(runs) == count and max(runs.values()) == 1, "a job was lost or ran twice"
    assert set(Job.objects.filter(id__in=result.ids).values_list("attempts", flat=True)) == {1}
    assert len(set(Execution.objects.values_list("node", flat=True))) == 2
    passed = pgbouncer.transactions(_database()) - before
    print(f"{passed:,} transactions through PgBouncer for {count:,} jobs")
    assert passed > count / 100  # the claims and acks went through the pooler
    for worker in workers:
        assert "instant pickup via LISTEN" in worker.log()
        assert NO_LISTEN not in worker.log()


def test_pickup_behind_pgbouncer_with_a_direct_listener(worker_processes, pgbouncer):
    worker = worker_processes.start(settings={"POLL_INTERVAL": 5, "SCHEDULER_INTERVAL": 5},
                                    env=pgbouncer.worker_env())
    worker.wait_for_log("instant pickup via LISTEN")
    wait_until(lambda: _listeners() == 1, 10, message="the direct LISTEN connection")
    latencies = pickup_latencies(20)
    median = statistics.median(latencies)
    print(f"pickup behind PgBouncer: median {median * 1000:.1f} ms, "
          f"max {latencies[-1] * 1000:.1f} ms")
    # Polling would take up to 5 s. The figure on a quiet machine (docs/scaling.md) is a few
    # ms; this bound tolerates a CI machine running three suites at once.
    assert median < 0.25, latencies
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0, worker.log()


def test_without_a_direct_listener_the_worker_polls_and_says_so_once(worker_processes,
                                                                     pgbouncer):
    worker = worker_processes.start(settings=FAST,
                                    env=pgbouncer.worker_env(direct_listener=False))
    worker.wait_for_log("kathikon worker")
    ids = kathikon.insert_many([(RECORD, {"n": i}) for i in range(50)]).ids
    wait_until(lambda: Job.objects.filter(id__in=ids, state="completed").count() == 50, 20,
               message="the jobs completed by polling")
    time.sleep(1)  # several polls later: still said once
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0, worker.log()
    log = worker.log()
    assert log.count(NO_LISTEN) == 1, log
    assert "polling every 0.2s instead" in log and "LISTEN_DATABASE" in log
    assert "instant pickup via LISTEN" not in log
    assert _listeners() == 0


def test_insert_admin_and_ops_behind_pgbouncer(transactional_db, pgbouncer):
    ids = kathikon.insert_many([(RECORD, {"n": i}) for i in range(3)]).ids
    Job.objects.filter(id__in=ids).update(state="dead", attempts=1, max_attempts=1)
    dead = list(Job.objects.filter(id__in=ids))
    environ = _environment(pgbouncer)
    client = subprocess.run([sys.executable, "-m", "tests.runtime.pgbouncer_client",
                             *[job.id.hex for job in dead]],
                            cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60)
    assert client.returncode == 0, client.stderr
    seen = json.loads(client.stdout.strip().splitlines()[-1])
    assert seen["through_pooler"] is True
    assert Job.objects.filter(pk=seen["kept"], state="available").exists()
    assert seen["rolled_back_found"] is False
    assert set(seen["pages"].values()) == {200}, seen["pages"]
    assert (seen["retry_status"], seen["states_after_retry"]) == (200, ["available"])
    ops = subprocess.run([sys.executable, str(MANAGE), "kathikon_ops", "summary", "--json"],
                         cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60)
    assert ops.returncode == 0, ops.stderr
    default = next(queue for queue in json.loads(ops.stdout) if queue["name"] == "default")
    assert default["counts"]["available"] == 4  # the 3 retried and the one kept
    paused = subprocess.run([sys.executable, str(MANAGE), "kathikon_ops", "pause", "emails"],
                            cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60)
    assert paused.returncode == 0, paused.stderr
    assert Queue.objects.get(name="emails").paused is True


def test_a_pooled_listen_database_set_on_purpose_is_used_with_a_warning(worker_processes,
                                                                        pgbouncer):
    """A session-mode pool keeps LISTEN, so an explicit choice is the user's: the worker
    listens there and warns; polling still runs the jobs."""
    worker = worker_processes.start(settings={**FAST, "LISTEN_DATABASE": "default"},
                                    env=pgbouncer.worker_env(direct_listener=False))
    worker.wait_for_log("kathikon worker")
    ids = kathikon.insert_many([(RECORD, {"n": i}) for i in range(20)]).ids
    wait_until(lambda: Job.objects.filter(id__in=ids, state="completed").count() == 20, 20,
               message="the jobs completed")
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0, worker.log()
    log = worker.log()
    assert log.count("warning: LISTEN_DATABASE 'default' goes through a connection pooler") == 1
    assert NO_LISTEN not in log and "instant pickup via LISTEN" in log
