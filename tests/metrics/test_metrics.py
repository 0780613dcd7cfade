"""Prometheus metrics (kathikon.metrics), read back with prometheus_client's own parser.

- The counters of ``kathikon_worker --processes 2 --metrics-port P`` (one exporter per
  node, on P and P+1) add up to exactly the jobs the two processes ran.
- The gauges of the Django view match what ``kathikon_ops summary --json`` says.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.request
from collections import Counter
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

import kathikon
from kathikon.models import Job
from kathikon.states import JobState
from kathikon.testing import drain_queue
from tests import workers
from tests.ops.conftest import make_job
from tests.runtime.conftest import ROOT, wait_until

parser = pytest.importorskip("prometheus_client.parser")


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(sample.name, sample.labels, sample.value)
            for family in parser.text_string_to_metric_families(text)
            for sample in family.samples]


def total(found: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    return sum(value for sample, have, value in found
               if sample == name and all(have.get(k) == v for k, v in labels.items()))


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports nobody listens on now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = probe.getsockname()[1]
        if first + count > 65535:
            continue
        try:
            for port in range(first, first + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise RuntimeError("no free ports")


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


@pytest.mark.slow
def test_counters_add_up_to_the_jobs_two_worker_processes_ran(worker_processes):
    kathikon.insert_many([(workers.Succeed, {"i": i}) for i in range(40)])
    kathikon.insert_many([(workers.Explode, {"i": i}, {"max_attempts": 1}) for i in range(5)])
    port = free_ports(2)
    worker = worker_processes.start("--processes", "2", "--node", "m", "--metrics-port",
                                    str(port), settings={"POLL_INTERVAL": 0.1})
    wait_until(lambda: Job.objects.filter(state__in=["completed", "dead"]).count() == 45,
               timeout=60, message="45 jobs to end")
    wait_until(lambda: all(f"on port {p}" in worker.log() for p in (port, port + 1)),
               timeout=20, message="both exporters")
    found = samples(scrape(port)) + samples(scrape(port + 1))
    ran = Counter(Job.objects.values_list("attempted_by", flat=True))
    assert set(ran) <= {"m-1", "m-2"}
    finished = "kathikon_jobs_finished_total"
    assert total(found, finished, state="completed", worker=workers.Succeed.path()) == 40
    assert total(found, finished, state="dead", worker=workers.Explode.path()) == 5
    assert total(found, finished) == 45
    assert total(found, "kathikon_job_run_seconds_count", queue="default") == 45
    assert total(found, "kathikon_job_queue_wait_seconds_count", queue="default") == 45


def test_database_gauges_match_the_ops_summary(db, client):
    for state, count in ((JobState.AVAILABLE, 3), (JobState.COMPLETED, 4), (JobState.DEAD, 2),
                         (JobState.SCHEDULED, 1)):
        for _ in range(count):
            make_job(state=state, attempts=int(state != JobState.AVAILABLE))
    make_job(queue="emails", worker=workers.Emails)
    kathikon.insert_many([(workers.Succeed, {"i": i}) for i in range(5)]
                         + [(workers.Explode, {"i": 0}, {"max_attempts": 1})])
    drained = drain_queue()  # after a drain, as an operator would look
    assert drained.completed >= 9 and drained.discarded + drained.failed == 1
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    found = samples(response.content.decode())
    out = StringIO()
    call_command("kathikon_ops", "summary", "--json", stdout=out)
    summary = json.loads(out.getvalue())
    queues = summary["queues"] if isinstance(summary, dict) else summary
    checked = 0
    for queue in queues:
        for state, count in queue["counts"].items():
            assert total(found, "kathikon_jobs", queue=queue["name"], state=state) == count
            checked += count
    assert checked == 17
    age = total(found, "kathikon_oldest_due_job_age_seconds", queue="default")
    assert 0 <= age < 60


def test_import_kathikon_works_without_prometheus_client_and_metrics_says_what_to_install():
    script = ("import sys; sys.modules['prometheus_client'] = None\n"
              "import django, os\n"
              "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'testproject.settings')\n"
              "django.setup()\n"
              "import kathikon\n"
              "try:\n"
              "    import kathikon.metrics\n"
              "except ImportError as exc:\n"
              "    print('refused:', exc)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**__import__("os").environ,
                                                      "KATHIKON_DB": "sqlite"})
    assert done.returncode == 0, done.stderr
    assert "refused: kathikon.metrics needs prometheus_client: pip install " \
           "'kathikon[prometheus]'" in done.stdout


def test_a_bad_metrics_port_is_refused_before_start(db):
    with pytest.raises(CommandError, match="not a range of TCP ports"):
        call_command("kathikon_worker", "--metrics-port", "65535", "--processes", "2")
    with pytest.raises(CommandError, match="not a range of TCP ports"):
        call_command("kathikon_worker", "--metrics-port", "0")


@pytest.mark.django_db(databases=["default", "second"])
def test_database_gauges_cover_queues_on_every_database(client):
    from django.test import override_settings

    two = {"QUEUES": {"default": {"concurrency": 10}, "reports": {"database": "second"}}}
    with override_settings(KATHIKON=two):
        kathikon.insert_many([(workers.Succeed, {"i": i}) for i in range(2)])
        kathikon.insert_many([(workers.Succeed, {"i": i}, {"queue": "reports"})
                              for i in range(3)])
        found = samples(client.get("/metrics").content.decode())
    assert total(found, "kathikon_jobs", queue="default", state="available") == 2
    assert total(found, "kathikon_jobs", queue="reports", state="available") == 3
    assert total(found, "kathikon_oldest_due_job_age_seconds", queue="reports") >= 0
    assert any(name == "kathikon_oldest_due_job_age_seconds" and labels.get("queue") == "reports"
               for name, labels, _ in found)
