"""The Django Tasks backend end to end: enqueue → Kathikon job → real executor → TaskResult."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from unittest.mock import ANY

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

import kathikon
from kathikon import compat, signals
from kathikon.compat import TASK_WORKER
from kathikon.jobspec import worker_class
from kathikon.storable import UNSTORED
from kathikon.testing import drain_queue
from tests import workers as core_workers
from tests.ecosystem import tasks

backends = pytest.importorskip("kathikon.backends", reason="needs django.tasks or django-tasks")
Status = compat.TaskResultStatus
NODE = "kathikon.testing"
ROOT = Path(__file__).resolve().parents[2]


def test_enqueue_inserts_a_kathikon_job(db):
    result = tasks.add.enqueue(2, 3)
    assert result.status == Status.READY
    assert (result.args, result.kwargs, result.backend) == ([2, 3], {}, "default")
    job = kathikon.fetch(result.id)
    # the worker column names the task (every list, filter and log line shows it); the
    # path resolves to the backend's worker
    assert job.worker == "tests.ecosystem.tasks.add"
    assert worker_class(job.worker) == ("tests.ecosystem.tasks.add", backends.TaskWorker)
    assert backends.TaskWorker.path() == TASK_WORKER
    assert job.args == {"task": "tests.ecosystem.tasks.add", "args": [2, 3], "kwargs": {}}
    assert (job.queue, job.priority, job.state) == ("default", 0, "available")
    assert result.enqueued_at == job.inserted_at
    assert result.started_at is None and result.finished_at is None
    assert result.attempts == 0 and result.worker_ids == [] and result.errors == []
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value


def test_a_task_runs_and_its_result_comes_back(db):
    result = tasks.add.enqueue(2, b=3)
    assert drain_queue().completed == 1
    fetched = tasks.add.get_result(result.id)
    assert fetched.status == Status.SUCCESSFUL and fetched.return_value == 5
    assert fetched.is_finished and fetched.attempts == 1 and fetched.worker_ids == [NODE]
    assert fetched.enqueued_at <= fetched.started_at <= fetched.finished_at
    assert fetched.last_attempted_at == fetched.started_at
    result.refresh()  # the original object catches up
    assert (result.status, result.return_value, result.attempts) == (Status.SUCCESSFUL, 5, 1)


def test_queue_and_priority_map_onto_the_job(db):
    first = tasks.send_email.enqueue("a@example.com")
    second = tasks.send_email.using(priority=-100, queue_name="default").enqueue("b@x.org")
    top = tasks.add.using(priority=100).enqueue(1, 1)
    assert [(kathikon.fetch(r.id).queue, kathikon.fetch(r.id).priority)
            for r in (first, second, top)] == [("emails", 10), ("default", -100), ("default", 100)]
    assert tasks.send_email.get_result(first.id).task.queue_name == "emails"
    assert tasks.send_email.get_result(second.id).task.priority == -100
    assert drain_queue("emails").completed == 1
    assert tasks.send_email.get_result(first.id).return_value == {"to": "a@example.com",
                                                                 "subject": "hi"}


def test_higher_priority_runs_first(db):
    order = []
    low = tasks.add.using(priority=-5).enqueue(0, 1)
    high = tasks.add.using(priority=50).enqueue(0, 2)

    def seen(sender, task_result, **kwargs):
        order.append(task_result.id)

    compat.task_started.connect(seen)
    try:
        drain_queue("default")
    finally:
        compat.task_started.disconnect(seen)
    assert order == [high.id, low.id]


def test_the_framework_rejects_unknown_queues_and_bad_priorities(db):
    with pytest.raises(compat.InvalidTask, match="Queue 'nope' is not valid"):
        tasks.add.using(queue_name="nope")
    with pytest.raises(compat.InvalidTask, match="priority"):
        tasks.add.using(priority=101)
    with override_settings(TASKS={"default": {
            "BACKEND": "kathikon.backends.KathikonBackend", "QUEUES": ["bad name!"]}}), \
            pytest.raises(compat.InvalidTask, match="not valid for Kathikon"):
        tasks.add.using(queue_name="bad name!")


def test_backend_declares_what_it_supports():
    backend = compat.task_backends["default"]
    assert isinstance(backend, backends.KathikonBackend)
    assert backend.supports_defer and backend.supports_priority
    assert backend.supports_get_result and backend.supports_async_task


def test_run_after_defers_the_job(db):
    later = timezone.now() + dt.timedelta(hours=1)
    result = tasks.add.using(run_after=later).enqueue(1, 2)
    job = kathikon.fetch(result.id)
    assert (job.state, job.scheduled_at) == ("scheduled", later)
    assert result.status == Status.READY and result.task.run_after == later
    assert drain_queue().completed == 0
    assert drain_queue(with_scheduled=True).completed == 1
    assert tasks.add.get_result(result.id).return_value == 3


def test_async_tasks_run_on_the_worker_loop(db):
    result = tasks.async_add.enqueue(20, 22)
    drain_queue()
    assert tasks.async_add.get_result(result.id).return_value == 42


def test_a_failing_task_records_class_path_and_traceback_per_attempt(db):
    result = tasks.always_fails.enqueue("boom")
    assert drain_queue().failed == 1
    result.refresh()
    assert result.status == Status.READY  # retryable: it will run again
    assert len(result.errors) == 1 and result.attempts == 1
    error = result.errors[0]
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert "ValueError: boom" in error.traceback and "always_fails" in error.traceback
    assert drain_queue(with_scheduled=True).failed == 1
    result.refresh()
    assert result.status == Status.FAILED and result.is_finished
    assert result.attempts == 2 and len(result.errors) == 2 and result.worker_ids == [NODE] * 2
    assert result.finished_at is not None
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    assert kathikon.fetch(result.id).state == "dead"


def test_takes_context_sees_the_attempt_number(db):
    result = tasks.with_context.enqueue("x")
    drain_queue()
    assert tasks.with_context.get_result(result.id).return_value == {
        "attempt": 1, "id": result.id, "label": "x"}
    flaky = tasks.flaky.enqueue()
    counts = drain_queue(with_scheduled=True, with_recursion=True)
    assert (counts.failed, counts.completed) == (1, 1)
    done = tasks.flaky.get_result(flaky.id)
    assert done.return_value == 2 and done.attempts == 2 and len(done.errors) == 1
    assert done.errors[0].exception_class_path == "builtins.RuntimeError"


def test_a_timeout_recorded_under_the_old_kind_still_reads_as_job_timeout(db):
    from kathikon.models import Job

    result = tasks.slow_sync.enqueue(3)
    legacy = {"attempt": 1, "at": "2026-01-01T00:00:00+00:00", "node": "old-node",
              "kind": "kathikon.executor.JobTimeout", "message": "timed out after 0.3s",
              "traceback": ""}
    Job.objects.filter(id=result.id).update(state="dead", attempts=1, errors=[legacy],
                                            completed_at=timezone.now())
    result.refresh()
    assert result.errors[0].exception_class_path == "kathikon.JobTimeout"
    assert result.errors[0].exception_class is kathikon.JobTimeout
    from kathikon.report import failure_summary

    assert [f.kind for f in failure_summary(window=10**9)] == ["kathikon.JobTimeout"]


def test_an_async_task_timeout_fails_the_attempt(db):
    result = tasks.slow_async.enqueue(3)
    assert kathikon.fetch(result.id).meta["timeout"] == 0.3
    assert drain_queue().failed == 1
    result.refresh()
    assert result.status == Status.FAILED
    assert result.errors[0].exception_class_path == "kathikon.JobTimeout"


@pytest.mark.parametrize("task", [tasks.slow_sync, tasks.slow_async], ids=["sync", "async"])
def test_the_worker_runtime_enforces_task_timeouts(transactional_db, task):
    """One timeout mechanism: TaskWorker.timeout_for(job), enforced by the executor pool."""
    from kathikon.runtime.acker import Acker
    from kathikon.runtime.dispatcher import Dispatcher
    from tests.runtime.conftest import wait_until

    result = task.enqueue(3)
    assert backends.TaskWorker.timeout_for(kathikon.fetch(result.id)) == 0.3
    acker = Acker().start()
    dispatcher = Dispatcher("default", 1, "tasks-node", acker, poll_interval=0.1).start()
    try:
        wait_until(lambda: kathikon.fetch(result.id).state == "dead", 5,
                   message="the timed-out task recorded")
        result.refresh()
        assert result.status == Status.FAILED
        assert result.errors[0].exception_class_path == "kathikon.JobTimeout"
    finally:
        dispatcher.stop_claiming()
        dispatcher.join(5)
        dispatcher.abandon_running()
        dispatcher.close()
        acker.stop(5)


def test_a_return_value_that_is_not_json_completes_the_task_with_the_marker(db):
    """The task ran: it must not run again. SUCCESSFUL, its return value the job's result,
    the marker that says why nothing was stored (issue 26)."""
    result = tasks.returns_object.using().enqueue()
    assert drain_queue().completed == 1
    result.refresh()
    assert (result.status, result.attempts, result.errors) == (Status.SUCCESSFUL, 1, [])
    marker = {UNSTORED: {"reason": "not_json", "type": "builtins.object", "message": ANY}}
    assert result.return_value == marker == kathikon.fetch(result.id).result
    assert tasks.returns_object.get_result(result.id).return_value == marker


def test_none_is_a_successful_return_value(db):
    result = tasks.plain.enqueue()
    drain_queue()
    result.refresh()
    assert result.status == Status.SUCCESSFUL and result.return_value is None


def test_enqueue_follows_the_callers_transaction(db):
    with pytest.raises(RuntimeError), transaction.atomic():
        result = tasks.add.enqueue(1, 1)
        raise RuntimeError("roll back")
    with pytest.raises(compat.TaskResultDoesNotExist):
        tasks.add.get_result(result.id)


def test_get_result_errors(db, insert_job):
    backend = compat.task_backends["default"]
    for bad in ("0" * 32, "not-an-id", insert_job(core_workers.Succeed).id.hex):
        with pytest.raises(compat.TaskResultDoesNotExist):
            backend.get_result(bad)
    other = tasks.add.enqueue(1, 2)
    with pytest.raises(compat.TaskResultMismatch):
        tasks.send_email.get_result(other.id)


def test_async_enqueue_and_results(db):
    async def scenario():
        result = await tasks.add.aenqueue(4, 5)
        fetched = await tasks.add.aget_result(result.id)
        return result, fetched

    result, fetched = async_to_sync(scenario)()
    assert fetched.id == result.id and fetched.status == Status.READY
    drain_queue()
    async_to_sync(result.arefresh)()
    assert result.return_value == 9


def test_django_task_signals_fire_besides_kathikons(db):
    seen = []

    def record(signal_name):
        def receiver(sender, task_result, **kwargs):
            seen.append((signal_name, sender, task_result.id, task_result.status))
        return receiver

    receivers = {name: record(name) for name in ("enqueued", "started", "finished")}
    compat.task_enqueued.connect(receivers["enqueued"])
    compat.task_started.connect(receivers["started"])
    compat.task_finished.connect(receivers["finished"])
    completed = []
    signals.job_completed.connect(lambda sender, job, **kw: completed.append(sender),
                                  weak=False, dispatch_uid="ec-completed")
    try:
        ok = tasks.add.enqueue(1, 2)
        drain_queue()
        bad = tasks.always_fails.enqueue("x")
        drain_queue()
        drain_queue(with_scheduled=True)
    finally:
        for name, receiver in receivers.items():
            getattr(compat, f"task_{name}").disconnect(receiver)
        signals.job_completed.disconnect(dispatch_uid="ec-completed")
    backend = backends.KathikonBackend
    assert seen == [
        ("enqueued", backend, ok.id, Status.READY),
        ("started", backend, ok.id, Status.RUNNING),
        ("finished", backend, ok.id, Status.SUCCESSFUL),
        ("enqueued", backend, bad.id, Status.READY),
        ("started", backend, bad.id, Status.RUNNING),  # attempt 1 fails: a retry, no finish
        ("started", backend, bad.id, Status.RUNNING),
        ("finished", backend, bad.id, Status.FAILED),
    ]
    assert completed == [backends.TaskWorker]


def test_cancelling_the_job_fails_the_task(db):
    finished = []
    receiver = lambda sender, task_result, **kw: finished.append(task_result.status)  # noqa: E731
    compat.task_finished.connect(receiver)
    try:
        result = tasks.add.enqueue(1, 2)
        kathikon.cancel(result.id)
    finally:
        compat.task_finished.disconnect(receiver)
    result.refresh()
    assert result.status == Status.FAILED and result.finished_at is not None
    assert finished == [Status.FAILED]


def test_options_per_backend_and_per_task(db):
    options = {"max_attempts": 7, "backoff": 2,
               "tasks": {"tests.ecosystem.tasks.add": {"max_attempts": 3, "timeout": 9,
                                                       "backoff": "math.sqrt"}}}
    with override_settings(TASKS={"default": {"BACKEND": "kathikon.backends.KathikonBackend",
                                              "QUEUES": ["default", "emails"],
                                              "OPTIONS": options}}):
        add = kathikon.fetch(tasks.add.enqueue(1, 2).id)
        email = kathikon.fetch(tasks.send_email.enqueue("a").id)
        fails = kathikon.fetch(tasks.always_fails.enqueue("a").id)  # @task(...) wins
    assert (add.max_attempts, add.meta["timeout"], add.meta["backoff"]) == (3, 9, "math.sqrt")
    assert (email.max_attempts, email.meta["backoff"], "timeout" in email.meta) == (7, 2, False)
    assert (fails.max_attempts, fails.meta["backoff"]) == (2, 0)
    add.attempts = 4
    assert backends.TaskWorker().backoff(add) == 2.0
    assert backends.TaskWorker().backoff(email) == 2.0
    default = kathikon.fetch(tasks.plain.enqueue().id)
    assert default.max_attempts == 20 and default.meta == {"task_backend": "default"}


def test_backend_checks():
    backend = backends.KathikonBackend("x", {"QUEUES": ["default", "elsewhere"], "OPTIONS": {
        "max_attempt": 3, "timeout": -1, "tasks": {"a.b": {"backoff": True}}}})
    ids = sorted(message.id for message in backend.check())
    # "elsewhere" is not in KATHIKON["QUEUES"]: kathikon_worker serves it anyway (no W101).
    assert ids == ["kathikon.E101", "kathikon.E102", "kathikon.E102"]
    assert backends.KathikonBackend("y", {}).check() == []


def test_bad_option_values_are_rejected_at_enqueue(db):
    with override_settings(TASKS={"default": {"BACKEND": "kathikon.backends.KathikonBackend",
                                              "OPTIONS": {"max_attempts": 0}}}), \
            pytest.raises(compat.InvalidTask, match="max_attempts"):
        tasks.plain.enqueue()


def test_inline_testing_mode_runs_tasks_at_enqueue(db):
    from kathikon.testing import testing_mode

    with testing_mode("inline"):
        result = tasks.add.enqueue(3, 4)
    assert result.status == Status.SUCCESSFUL and result.return_value == 7


@pytest.mark.django_db(transaction=True)
def test_results_are_fetched_from_another_process():
    result = tasks.always_fails.enqueue("seen elsewhere")
    drain_queue()
    done = tasks.add.enqueue(5, 6)
    drain_queue()
    script = (
        "import json, django; django.setup()\n"
        "from tests.ecosystem import tasks\n"
        f"bad = tasks.always_fails.get_result({result.id!r})\n"
        f"ok = tasks.add.get_result({done.id!r})\n"
        "print(json.dumps({'bad': [bad.status, bad.errors[0].exception_class_path,"
        " bad.attempts], 'ok': [ok.status, ok.return_value]}))\n")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings",
           "KATHIKON_DB_NAME": str(connection.settings_dict["NAME"]), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == {
        "bad": ["FAILED", "builtins.ValueError", 2], "ok": ["SUCCESSFUL", 11]}


def test_tasks_with_kathikon_options_pickle():
    import pickle

    if compat.SOURCE != "django.tasks":
        pytest.skip("the django-tasks backport's Task does not pickle")

    again = pickle.loads(pickle.dumps(tasks.always_fails))
    assert again == tasks.always_fails and again.max_attempts == 2
    assert isinstance(again, backends.KathikonTask)


def test_a_second_backend_alias_keeps_its_own_options(db):
    kathikon_backend = "kathikon.backends.KathikonBackend"
    with override_settings(TASKS={
            "default": {"BACKEND": kathikon_backend, "QUEUES": ["default", "emails"]},
            "bulk": {"BACKEND": kathikon_backend, "QUEUES": [],
                     "OPTIONS": {"max_attempts": 4, "timeout": 5}}}):
        result = tasks.plain.using(backend="bulk", queue_name="bulk-imports").enqueue()
        job = kathikon.fetch(result.id)
        assert (job.queue, job.max_attempts, job.meta) == (
            "bulk-imports", 4, {"task_backend": "bulk", "timeout": 5})
        fetched = compat.task_backends["bulk"].get_result(result.id)
        assert (fetched.backend, fetched.task.backend, fetched.task.queue_name) == (
            "bulk", "bulk", "bulk-imports")
        assert drain_queue("bulk-imports").completed == 1
        result.refresh()
        assert result.status == Status.SUCCESSFUL


def test_a_unique_task_enqueued_twice_is_one_job(db):
    options = {"tasks": {"tests.ecosystem.tasks.add": {"unique": {"keys": ["args"]}}}}
    with override_settings(TASKS={"default": {"BACKEND": "kathikon.backends.KathikonBackend",
                                              "QUEUES": ["default", "emails"],
                                              "OPTIONS": options}}):
        first = tasks.add.enqueue(1, 2)
        again = tasks.add.enqueue(1, 2)
        other = tasks.add.enqueue(2, 2)
        plain = tasks.plain.enqueue()
        plain_again = tasks.plain.enqueue()
    assert first.id == again.id != other.id
    assert plain.id != plain_again.id
    assert kathikon.fetch(again.id).conflict is False  # a fetched job is just a job
    from kathikon.models import Job
    assert Job.objects.count() == 4


def test_a_bad_unique_task_option_is_rejected_at_enqueue(db):
    with override_settings(TASKS={"default": {"BACKEND": "kathikon.backends.KathikonBackend",
                                              "OPTIONS": {"unique": {"period": -1}}}}), \
            pytest.raises(compat.InvalidTask, match="period"):
        tasks.plain.enqueue()
