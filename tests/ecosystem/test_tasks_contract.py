"""Django's Tasks contract as KathikonBackend keeps it: timestamps, renamed tasks, versions."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import kathikon
from kathikon import compat
from kathikon.models import Job
from kathikon.testing import drain_queue
from tests.ecosystem import tasks

backends = pytest.importorskip("kathikon.backends", reason="needs django.tasks or django-tasks")
Status = compat.TaskResultStatus
ROOT = Path(__file__).resolve().parents[2]


def _rename(result_id: str, path: str) -> None:
    """What a deploy that renamed or deleted the task leaves behind: the job names ``path``
    (its worker column and its args)."""
    job = kathikon.fetch(result_id)
    Job.objects.filter(pk=job.pk).update(worker=path, args={**job.args, "task": path})


# -- started_at is the first attempt, last_attempted_at the latest ------------------------------

def test_started_at_is_the_first_attempt_and_last_attempted_at_the_latest(db):
    result = tasks.flaky.enqueue()  # fails attempt 1, succeeds on attempt 2
    assert result.started_at is None and result.last_attempted_at is None
    assert drain_queue().failed == 1
    result.refresh()
    first = kathikon.fetch(result.id).started_at
    assert result.status == Status.READY
    assert result.started_at == result.last_attempted_at == first
    assert drain_queue(with_scheduled=True).completed == 1
    result.refresh()
    job = kathikon.fetch(result.id)
    assert result.status == Status.SUCCESSFUL and result.attempts == 2
    assert result.started_at == first  # still the first attempt's start
    assert result.last_attempted_at == job.started_at  # the second attempt's
    assert result.started_at < result.last_attempted_at
    assert job.errors[0]["started_at"] == first.isoformat()


def test_a_rescued_attempt_keeps_its_start_too(db):
    from kathikon.storage import rescue

    result = tasks.add.enqueue(1, 2)
    job = kathikon.claim(result.id, node="gone:1")  # a node that then vanished
    assert [r.job.id for r in rescue.rescue_jobs(nodes=["gone:1"])] == [job.id]
    assert kathikon.fetch(result.id).errors[-1]["started_at"] == job.started_at.isoformat()
    assert drain_queue(with_scheduled=True).completed == 1
    result.refresh()
    assert result.started_at == job.started_at
    assert result.started_at < result.last_attempted_at


def test_rows_written_before_attempt_starts_were_kept_read_as_before(db):
    result = tasks.always_fails.enqueue("old row")
    drain_queue()
    job = kathikon.fetch(result.id)
    Job.objects.filter(pk=job.pk).update(
        errors=[{k: v for k, v in job.errors[0].items() if k != "started_at"}])
    result.refresh()
    assert result.started_at == result.last_attempted_at == job.started_at


# -- task_finished: once per task, when it has finished -----------------------------------------

@pytest.fixture
def sent():
    """(signal, task_result.id, status, exception class in sys.exc_info()) per Django signal."""
    seen: list[tuple[str, str, str, type | None]] = []

    def record(name):
        def receiver(sender, task_result, **kwargs):
            assert sender is backends.KathikonBackend
            seen.append((name, task_result.id, task_result.status, sys.exc_info()[0]))
        return receiver

    receivers = {name: record(name) for name in ("started", "finished")}
    for name, receiver in receivers.items():
        getattr(compat, f"task_{name}").connect(receiver)
    yield seen
    for name, receiver in receivers.items():
        getattr(compat, f"task_{name}").disconnect(receiver)


def test_a_task_that_succeeds_at_once_finishes_once(db, sent):
    result = tasks.add.enqueue(1, 2)
    assert drain_queue().completed == 1
    assert sent == [("started", result.id, Status.RUNNING, None),
                    ("finished", result.id, Status.SUCCESSFUL, None)]


def test_a_failed_attempt_with_a_retry_due_does_not_finish_the_task(db, sent):
    result = tasks.flaky.enqueue()  # fails attempt 1, succeeds on attempt 2
    assert drain_queue().failed == 1
    assert kathikon.fetch(result.id).state == "retryable"
    assert sent == [("started", result.id, Status.RUNNING, None)]  # READY: not finished
    assert drain_queue(with_scheduled=True).completed == 1
    assert sent == [("started", result.id, Status.RUNNING, None),
                    ("started", result.id, Status.RUNNING, None),
                    ("finished", result.id, Status.SUCCESSFUL, None)]


def test_a_task_failing_every_attempt_finishes_once_failed(db, sent):
    result = tasks.always_fails.enqueue("boom")  # max_attempts=2
    assert drain_queue().failed == 1
    assert drain_queue(with_scheduled=True).failed == 1
    assert kathikon.fetch(result.id).state == "dead"
    # The last attempt's exception is in sys.exc_info(), for Django's log receiver.
    assert sent == [("started", result.id, Status.RUNNING, None),
                    ("started", result.id, Status.RUNNING, None),
                    ("finished", result.id, Status.FAILED, ValueError)]


def test_a_discarded_task_finishes_once_failed(db, sent):
    result = tasks.discards.enqueue()  # attempt 1 fails, attempt 2 discards
    counts = drain_queue(with_scheduled=True, with_recursion=True)
    assert (counts.failed, counts.discarded) == (1, 1)
    assert [(name, status) for name, _, status, _ in sent] == [
        ("started", Status.RUNNING), ("started", Status.RUNNING), ("finished", Status.FAILED)]
    assert kathikon.fetch(result.id).state == "dead"


def test_a_snoozed_task_finishes_once_when_it_completes(db, sent):
    result = tasks.snoozes_once.enqueue()
    assert drain_queue().snoozed == 1
    assert [name for name, *_ in sent] == ["started"]  # snoozed: READY, runs again
    assert drain_queue(with_scheduled=True).completed == 1
    assert [(name, status) for name, _, status, _ in sent] == [
        ("started", Status.RUNNING), ("started", Status.RUNNING),
        ("finished", Status.SUCCESSFUL)]
    assert tasks.snoozes_once.get_result(result.id).return_value == "woke"


@pytest.mark.parametrize("task, finished", [
    (tasks.add, []),  # attempts left: back to READY, not finished
    (tasks.slow_sync, [Status.FAILED]),  # max_attempts=1: the rescue leaves it dead
], ids=["retried", "dead"])
def test_a_rescued_task_finishes_only_when_the_rescue_leaves_it_dead(db, sent, task, finished):
    from kathikon.storage import rescue

    result = task.enqueue(1)
    kathikon.claim(result.id, node="gone:1")  # an external runner's claim, then it vanished
    assert len(rescue.rescue_jobs(nodes=["gone:1"])) == 1
    assert [status for name, _, status, _ in sent if name == "finished"] == finished


def test_a_cancelled_task_finishes_once_failed_without_starting(db, sent):
    result = tasks.add.enqueue(1, 2)
    kathikon.cancel(result.id)
    assert sent == [("finished", result.id, Status.FAILED, None)]
    assert drain_queue().completed == 0 and len(sent) == 1


# -- get_result for a task that no longer imports -------------------------------------------------

@pytest.mark.parametrize("path, kind", [
    ("tests.ecosystem.tasks.renamed_away", "builtins.ImportError"),
    ("tests.ecosystem.gone_module.add", "builtins.ModuleNotFoundError"),
    ("tests.ecosystem.tasks.time", "builtins.TypeError"),  # a module, not a Task
])
def test_get_result_of_a_task_that_no_longer_imports_is_failed_saying_why(db, path, kind):
    result = tasks.add.enqueue(1, 2)
    _rename(result.id, path)
    backend = compat.task_backends["default"]
    found = backend.get_result(result.id)  # not kathikon.workers.Discard
    assert found.status == Status.FAILED and found.id == result.id
    assert found.errors[-1].exception_class_path == kind
    assert path in found.errors[-1].traceback
    assert found.task.module_path == path
    with pytest.raises(kathikon.Discard, match=re.escape(path)):
        found.task.call(1, 2)
    result.refresh()  # TaskResult.refresh goes through get_result too
    assert result.status == Status.FAILED


def test_the_renamed_task_ends_dead_with_one_error_saying_why(db):
    """Past UNKNOWN_WORKER_GRACE (0 in-process) a task path that no longer imports is an
    unknown worker like any other (a worker process holds it back until then, in case a
    newer release knows it); Django's task_finished is still sent, once."""
    finished = []

    def on_finished(sender, task_result, **kwargs):
        finished.append(task_result.status)

    compat.task_finished.connect(on_finished)
    try:
        result = tasks.add.enqueue(1, 2)
        _rename(result.id, "tests.ecosystem.tasks.renamed_away")
        assert drain_queue().discarded == 1
    finally:
        compat.task_finished.disconnect(on_finished)
    found = compat.task_backends["default"].get_result(result.id)
    assert found.status == Status.FAILED and found.finished_at is not None
    assert [error.exception_class_path for error in found.errors] == ["kathikon.UnknownWorker"]
    assert "tests.ecosystem.tasks.renamed_away" in found.errors[0].traceback
    assert finished == [Status.FAILED]


def test_a_completed_task_renamed_later_keeps_its_result(db):
    result = tasks.add.enqueue(1, 2)
    drain_queue()
    _rename(result.id, "tests.ecosystem.tasks.renamed_away")
    found = compat.task_backends["default"].get_result(result.id)
    assert found.status == Status.SUCCESSFUL and found.return_value == 3 and not found.errors


# -- the django-tasks backport: lower bound and the InvalidTaskError rename -----------------------

def _tasks_floor() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    return re.search(r'"django-tasks>=([0-9.]+)"', text).group(1)


def test_the_lts_run_uses_the_lowest_django_tasks_the_extra_allows():
    floor = _tasks_floor()
    assert floor == "0.12"  # 0.8-0.11 have no TaskResultStatus.SUCCESSFUL
    if compat.SOURCE == "django.tasks":  # Django 6: the backport is not needed
        assert backends.STATUS[kathikon.JobState.COMPLETED] == "SUCCESSFUL"
        return
    installed = importlib.metadata.version("django-tasks")
    assert installed.split(".")[:2] == floor.split("."), (
        f"django-tasks {installed} in this venv; scripts/bootstrap.sh installs =={floor}")


def _fake_backport(monkeypatch, **exceptions: type) -> None:
    """django_tasks as sys.modules sees it, with ``exceptions`` in its exceptions module."""
    monkeypatch.setitem(sys.modules, "django.tasks", None)  # as on Django 5.2
    names = {
        "django_tasks": {"DEFAULT_TASK_QUEUE_NAME": "default", "TaskContext": object,
                         "TaskResult": object, "task": object, "task_backends": {},
                         "TaskResultStatus": types.SimpleNamespace(SUCCESSFUL="SUCCESSFUL")},
        "django_tasks.backends": {},
        "django_tasks.backends.base": {"BaseTaskBackend": object},
        "django_tasks.base": {"Task": object, "TaskError": object},
        "django_tasks.exceptions": {"TaskResultDoesNotExist": LookupError,
                                    "TaskResultMismatch": TypeError, **exceptions},
        "django_tasks.signals": {"task_enqueued": 1, "task_finished": 2, "task_started": 3},
    }
    for name, attrs in names.items():
        module = types.ModuleType(name)
        module.__path__ = []  # a package, so its submodules import
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)


def _fresh_compat() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("compat_probe", kathikon.compat.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class InvalidTask(Exception):
    pass


class InvalidTaskError(Exception):
    pass


@pytest.mark.parametrize("exceptions, expected", [
    ({"InvalidTaskError": InvalidTaskError}, InvalidTaskError),  # django-tasks 0.12
    ({"InvalidTask": InvalidTask}, InvalidTask),  # after the rename
    ({"InvalidTask": InvalidTask, "InvalidTaskError": InvalidTaskError}, InvalidTask),
])
def test_compat_survives_the_backports_invalid_task_rename(monkeypatch, exceptions, expected):
    _fake_backport(monkeypatch, **exceptions)
    probe = _fresh_compat()
    assert probe.SOURCE == "django_tasks" and probe.AVAILABLE
    assert probe.InvalidTask is expected
    assert probe.TaskResultDoesNotExist is LookupError


def test_compat_reports_a_backport_older_than_0_12_unavailable(monkeypatch):
    _fake_backport(monkeypatch, InvalidTaskError=InvalidTaskError)
    monkeypatch.setattr(sys.modules["django_tasks"], "TaskResultStatus",
                        types.SimpleNamespace(COMPLETE="COMPLETE"))  # 0.11's name
    probe = _fresh_compat()
    assert probe.SOURCE == "" and not probe.AVAILABLE


# -- a system check: KathikonBackend without the kathikon app -------------------------------------

def test_check_errors_when_tasks_names_kathikon_but_the_app_is_not_installed(tmp_path):
    extra = "" if compat.SOURCE == "django.tasks" else "INSTALLED_APPS += ['django_tasks']\n"
    (tmp_path / "without_kathikon.py").write_text(
        "from testproject.settings import *  # noqa: F403\n"
        "INSTALLED_APPS = [app for app in INSTALLED_APPS  # noqa: F405\n"
        "                  if app not in ('kathikon', 'testproject.demo')]\n" + extra)
    # Django registers the Tasks checks when django.tasks is imported (a @task module is)
    script = ("import django; django.setup()\n"
              "import kathikon.compat\n"
              "from django.core.management import call_command\n"
              "call_command('check')\n")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "without_kathikon",
           "KATHIKON_DB": "sqlite",  # model checks on MariaDB connect; the check needs no table
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "kathikon.E103" in done.stderr and "INSTALLED_APPS" in done.stderr


def test_no_e103_when_the_app_is_installed():
    assert "kathikon.E103" not in [m.id for m in backends.KathikonBackend("y", {}).check()]
