"""One node name, one live process: registration, take-over, heartbeats by instance, and the
supervisor's restart delay (the real processes are in test_faults_nodes.py)."""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
from typing import Any

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

import kathikon
from kathikon import storage
from kathikon.exceptions import NodeNameInUse, NodeSuperseded
from kathikon.models import Job, Node
from kathikon.runtime.dispatcher import Dispatcher
from kathikon.runtime.heartbeat import Heartbeat
from kathikon.runtime.supervisor import EXIT_NODE_IN_USE, HEALTHY_RUN, RESTART_BACKOFF, Supervisor
from kathikon.runtime.worker import WorkerProcess, _predecessor_gone
from tests import workers

RESCUE_AFTER = 60.0


def take(name: str, instance: str, **options: Any) -> Node:
    """Register as the worker does: exclusively."""
    options.setdefault("exclusive_after", RESCUE_AFTER)
    return storage.register_node(name, "elsewhere", 4242, {"default": 5}, instance=instance,
                                 **options)


@pytest.mark.django_db
def test_a_name_held_by_a_live_process_is_refused_and_nothing_changes():
    take("web", "first")
    kathikon.insert(workers.Succeed, {})
    (job,) = storage.claim_jobs("default", 1, "web")
    with pytest.raises(NodeNameInUse, match=r"node name 'web' is held by a live worker process "
                                            r"\(pid 4242 on host elsewhere"):
        take("web", "second")
    node = Node.objects.get(name="web")
    assert node.instance == "first" and node.status == "running"
    assert Job.objects.get(id=job.id).state == "running"  # its jobs are not rescued


@pytest.mark.django_db
@pytest.mark.parametrize("how", ["stopped", "silent", "gone", "same instance"])
def test_a_name_whose_process_is_gone_is_taken_and_its_jobs_rescued(how: str):
    take("web", "first")
    kathikon.insert(workers.Succeed, {})
    (job,) = storage.claim_jobs("default", 1, "web")
    options: dict[str, Any] = {}
    instance = "second"
    if how == "stopped":
        Node.objects.filter(name="web").update(status="stopped")
    elif how == "silent":
        Node.objects.filter(name="web").update(
            heartbeat_at=storage.db_now() - dt.timedelta(seconds=RESCUE_AFTER + 1))
    elif how == "gone":
        options["gone"] = lambda row: row.pid == 4242
    else:
        instance = "first"
    node = take("web", instance, **options)
    assert node.instance == instance and node.status == "running"
    row = Job.objects.get(id=job.id)
    assert row.state == "retryable"
    assert "node web restarted" in row.errors[-1]["message"]


@pytest.mark.django_db(transaction=True)
def test_two_processes_registering_one_new_name_at_once_one_wins(concurrent_db: None):
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def register(instance: str) -> None:
        try:
            barrier.wait()
            take("same", instance)
            outcomes.append("registered")
        except NodeNameInUse:
            outcomes.append("refused")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=register, args=(f"i{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["refused", "registered"]
    assert Node.objects.filter(name="same").count() == 1


@pytest.mark.django_db
def test_a_process_whose_name_was_taken_over_learns_it_from_its_heartbeat():
    take("web", "first")
    Node.objects.filter(name="web").update(  # frozen past RESCUE_AFTER ...
        heartbeat_at=storage.db_now() - dt.timedelta(seconds=RESCUE_AFTER + 1))
    take("web", "second")                    # ... and another process took the name
    assert storage.heartbeat("web", instance="second")
    with pytest.raises(NodeSuperseded, match="taken over by another process"):
        storage.heartbeat("web", instance="first")
    seen: list[Exception] = []
    beat = Heartbeat("web", instance="first", on_superseded=seen.append)
    assert beat.run_once() is False and len(seen) == 1 and beat.superseded is seen[0]
    assert beat.run_once() is False and len(seen) == 1  # told once, beats no more
    # Its queue changes and shutdown marks leave the new holder alone.
    assert not storage.set_node_queues("web", {"emails": 1}, instance="first")
    assert Node.objects.get(name="web").queues == {"default": 5}
    assert not storage.mark_node_stopping("web", instance="first")
    assert not storage.mark_node_stopped("web", instance="first")
    assert Node.objects.get(name="web").status == "running"
    assert storage.mark_node_stopped("web", instance="second")


@pytest.mark.django_db
def test_a_queue_refresh_that_adds_no_queue_writes_no_node_row():
    """The refresh runs every poll interval: the node row's queues are written only when a
    queue was added, not once per limited queue each time."""
    worker = WorkerProcess(node="web", queues={"default": 2})
    worker.dispatchers["default"] = Dispatcher("default", 2, "web", worker.acker)
    take("web", worker.instance)
    kathikon.set_queue_limits("default", global_limit=1)  # a limited queue: its flow is read
    with CaptureQueriesContext(connections["default"]) as queries:
        worker._refresh_queues()
    assert worker.dispatchers["default"].limits.global_limit == 1
    assert [q["sql"] for q in queries.captured_queries if "kathikon_node" in q["sql"]] == []


@pytest.mark.django_db
def test_a_heartbeat_with_an_instance_writes_a_missing_row_again_as_its_own():
    take("web", "first")
    Node.objects.all().delete()
    assert Heartbeat("web", instance="first", pid=7).run_once() is False
    assert Node.objects.get(name="web").instance == "first"
    assert Heartbeat("web", instance="first").run_once() is True


def test_predecessor_gone_checks_the_pid_on_this_host_only():
    host = socket.gethostname()

    def row(hostname: str, pid: int | None) -> Node:
        return Node(name="n", hostname=hostname, pid=pid)

    assert _predecessor_gone(row(host, os.getpid()))  # our pid: a reused one, not a live peer
    assert not _predecessor_gone(row(host, os.getppid()))  # alive
    assert not _predecessor_gone(row("another-host", 999_999_999))
    assert not _predecessor_gone(row(host, None))
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
    assert _predecessor_gone(row(host, child))  # dead and reaped


# -- the supervisor's restart delay ------------------------------------------------------------


class Ticks:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_restart_delay_backs_off_on_quick_crashes_and_resets_after_a_healthy_run():
    ticks = Ticks()
    supervisor = Supervisor(2, lambda index, parent: None, clock=ticks)

    def crash_after(index: int, seconds: float) -> float:
        supervisor.spawned_at[index] = ticks.now
        ticks.now += seconds
        return supervisor.restart_delay(index)

    assert [crash_after(0, 1.0) for _ in range(6)] == [*RESTART_BACKOFF, RESTART_BACKOFF[-1]]
    assert crash_after(1, 0.5) == RESTART_BACKOFF[0]  # each child has its own count
    assert crash_after(0, HEALTHY_RUN) == RESTART_BACKOFF[0]  # ran healthily: start again
    assert crash_after(0, 2.0) == RESTART_BACKOFF[1]
    assert crash_after(0, HEALTHY_RUN + 60) == RESTART_BACKOFF[0]


def test_a_child_refused_its_node_name_is_not_restarted():
    spawned: list[int] = []
    supervisor = Supervisor(2, lambda index, parent: None)
    supervisor._spawn = spawned.append  # type: ignore[method-assign]
    supervisor._reaped(0, 4242, EXIT_NODE_IN_USE)
    assert spawned == [] and supervisor._exit_code == EXIT_NODE_IN_USE
