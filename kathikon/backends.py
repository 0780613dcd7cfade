"""A Django Tasks backend: ``@task`` functions run as Kathikon jobs on ``kathikon_worker``.

    # settings.py
    TASKS = {
        "default": {
            "BACKEND": "kathikon.backends.KathikonBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {                      # all optional
                "max_attempts": 5,            # default: KATHIKON["MAX_ATTEMPTS"]
                "timeout": 60,                # seconds; default: no limit
                "backoff": 30,                # seconds, or a dotted path to f(attempt)
                "unique": None,               # True or {"period": 60, ...}: see flow-control
                "tasks": {"myapp.tasks.send_email": {"max_attempts": 10}},
            },
        },
    }

    # myapp/tasks.py
    from django.tasks import task          # django_tasks on Django 5.2

    @task(queue_name="emails", priority=10)
    def send_email(to, subject): ...

    result = send_email.enqueue("a@example.com", "Hi")   # a Kathikon job, id = result.id
    send_email.get_result(result.id).status                # READY, RUNNING, SUCCESSFUL, FAILED

A task is one job of the built-in worker :class:`TaskWorker` (args ``{"task":
path, "args": [...], "kwargs": {...}}``), so it shares the table, the
transaction semantics, the admin, retries and Kathikon's signals with every
other job. Per-task options come from, in order: ``@task(max_attempts=…,
timeout=…, backoff=…)`` (this backend's ``task_class`` accepts them),
``OPTIONS["tasks"][task path]``, then ``OPTIONS``. Django's ``task_enqueued``,
``task_started`` and ``task_finished`` signals are sent besides Kathikon's:
``task_started`` once per attempt, ``task_finished`` once per task, when its job
is completed, dead or cancelled. See docs/tasks-backend.md.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from inspect import iscoroutinefunction
from typing import Any

from django.apps import apps
from django.core import checks
from django.utils import timezone
from django.utils.module_loading import import_string

from kathikon import compat, signals
from kathikon.compat import TASK_WORKER
from kathikon.conf import QUEUE_NAME
from kathikon.exceptions import InvalidJob, JobNotFound, read_kind
from kathikon.states import TERMINAL_STATES, JobState
from kathikon.unique import as_unique
from kathikon.workers import Discard, Outcome, Worker

if not compat.AVAILABLE:  # pragma: no cover - depends on the installed Django
    raise ImportError("kathikon.backends needs Django >= 6.0 (django.tasks) or the "
                      "django-tasks backport >= 0.12: pip install 'kathikon[tasks]'")

STATUS = {
    JobState.SCHEDULED: compat.TaskResultStatus.READY,
    JobState.AVAILABLE: compat.TaskResultStatus.READY,
    JobState.RETRYABLE: compat.TaskResultStatus.READY,
    JobState.CLAIMED: compat.TaskResultStatus.RUNNING,
    JobState.RUNNING: compat.TaskResultStatus.RUNNING,
    JobState.COMPLETED: compat.TaskResultStatus.SUCCESSFUL,
    JobState.DEAD: compat.TaskResultStatus.FAILED,
    JobState.CANCELLED: compat.TaskResultStatus.FAILED,
    # a workflow step (kathikon.workflows) waiting for its dependencies, or held for a person
    JobState.WAITING: compat.TaskResultStatus.READY,
    JobState.HELD: compat.TaskResultStatus.READY,
}
OPTION_NAMES = ("max_attempts", "timeout", "backoff")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KathikonTask(compat.Task):
    """A Task with Kathikon's per-task options: ``@task(max_attempts=3, timeout=30)``.

    ``unique`` (True, a dict of ``kathikon.Unique`` fields or a ``Unique``): an
    enqueue whose task path and arguments match a pending one returns that task's
    result instead of a new one (keys pick from ``task``, ``args`` and ``kwargs``).
    """

    max_attempts: int | None = None
    timeout: float | None = None
    backoff: float | str | None = None
    unique: Any = None


class KathikonBackend(compat.BaseTaskBackend):
    """Runs Django Tasks as Kathikon jobs; supports defer, priority, async tasks and results."""

    task_class = KathikonTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def validate_task(self, task: Any) -> None:
        super().validate_task(task)
        if not QUEUE_NAME.match(task.queue_name):
            raise compat.InvalidTask(f"Queue name {task.queue_name!r} is not valid for "
                                     "Kathikon: use 1-63 letters, digits, '_', '-' or '.'.")
        problem = _option_problem(self.job_options(task))
        if problem:
            raise compat.InvalidTask(problem)
        try:
            as_unique(self.job_options(task)["unique"])
        except InvalidJob as exc:
            raise compat.InvalidTask(str(exc)) from None

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        from kathikon import api

        worker, payload, options = self.job_spec(task, args, kwargs)
        return task_result(api.insert(worker, payload, **options))

    def job_spec(self, task: Any, args: Any, kwargs: Any) -> tuple[str, dict[str, Any],
                                                                    dict[str, Any]]:
        """``(worker, args, options)`` of the job that runs ``task(*args, **kwargs)``: what
        ``enqueue`` inserts, and what a workflow step of a task is (kathikon.workflows).
        The worker is the task's import path (it resolves to :class:`TaskWorker`), so the
        admin, the reports, ``kathikon_ops`` and the log lines name the task."""
        self.validate_task(task)
        payload = {"task": task.module_path, "args": compat.normalize_json(list(args)),
                   "kwargs": compat.normalize_json(dict(kwargs))}
        options = self.job_options(task)
        meta: dict[str, Any] = {"task_backend": self.alias}
        for name in ("timeout", "backoff"):
            if options.get(name) is not None:
                meta[name] = options[name]
        run_after = task.run_after
        if run_after is not None:
            if timezone.is_naive(run_after):
                run_after = timezone.make_aware(run_after)
            meta["run_after"] = run_after.isoformat()
        return task.module_path, payload, {
            "queue": task.queue_name, "priority": task.priority,
            "max_attempts": options.get("max_attempts"), "schedule_at": run_after,
            "meta": meta, "unique": options["unique"]}

    def get_result(self, result_id: str) -> Any:
        from kathikon import api

        try:
            job = api.fetch(result_id)
        except JobNotFound:
            raise compat.TaskResultDoesNotExist(result_id) from None
        if not is_task_job(job):
            raise compat.TaskResultDoesNotExist(result_id)
        return task_result(job)

    def job_options(self, task: Any) -> dict[str, Any]:
        """max_attempts, timeout, backoff and unique for ``task``: decorator, then OPTIONS."""
        per_task = (self.options.get("tasks") or {}).get(task.module_path) or {}
        merged = {}
        for name in (*OPTION_NAMES, "unique"):
            value = getattr(task, name, None)
            if value is None:
                value = per_task.get(name, self.options.get(name))
            merged[name] = value
        return merged

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        found: list[checks.CheckMessage] = []
        if not apps.is_installed("kathikon"):
            found.append(checks.Error(
                f"TASKS[{self.alias!r}] uses KathikonBackend, but 'kathikon' is not in "
                "INSTALLED_APPS: its jobs table, its checks and kathikon_worker are missing.",
                hint="Add 'kathikon' to INSTALLED_APPS and run manage.py migrate.",
                id="kathikon.E103"))
        unknown = set(self.options) - {*OPTION_NAMES, "unique", "tasks"}
        if unknown:
            found.append(checks.Error(
                f"TASKS[{self.alias!r}]['OPTIONS'] has unknown keys {sorted(unknown)}.",
                hint="Kathikon's backend takes max_attempts, timeout, backoff, unique and "
                "tasks.",
                id="kathikon.E101"))
        tasks = self.options.get("tasks") or {}
        for label, options in [("OPTIONS", self.options), *tasks.items()]:
            problem = _option_problem({name: options.get(name) for name in OPTION_NAMES})
            if problem:
                found.append(checks.Error(f"TASKS[{self.alias!r}] {label}: {problem}",
                                          hint="See docs/tasks-backend.md.", id="kathikon.E102"))
        # Queues declared here and missing from KATHIKON["QUEUES"] are served by
        # kathikon_worker by default (conf.served_queue_names): no warning needed.
        return found


class TaskWorker(Worker):
    """Runs one Django Task: ``args = {"task": dotted path, "args": [...], "kwargs": {...}}``.

    Async task functions run on the worker process's event loop. ``meta``
    carries the backend alias, the timeout and the backoff chosen at enqueue;
    the timeout is enforced like any worker's (:meth:`timeout_for`): async
    tasks are cancelled, a sync task's attempt is failed by the worker
    process's executor pool.
    """

    @classmethod
    def timeout_for(cls, job: Any) -> float | None:
        return job.meta.get("timeout")

    def perform(self, job: Any) -> Any:
        task = load_task(task_path(job))
        args = list(job.args.get("args") or [])
        kwargs = dict(job.args.get("kwargs") or {})
        if task.takes_context:
            args.insert(0, compat.TaskContext(task_result=task_result(job, task)))
        if iscoroutinefunction(task.func):
            from kathikon.executor import job_timeout
            from kathikon.runtime.loop import run_coroutine

            value = run_coroutine(task.func(*args, **kwargs), job_timeout(type(self), job))
        else:
            value = task.func(*args, **kwargs)
        if isinstance(value, Outcome):
            return value
        try:
            return compat.normalize_json(value)
        except (TypeError, ValueError, RecursionError):
            # Not JSON: the task ran, so it must not run again. Returned as it is, the job
            # completes with the marker of kathikon.storable as its result (and return_value).
            return value

    def backoff(self, job: Any) -> float:
        spec = job.meta.get("backoff")
        if spec is None:
            return super().backoff(job)
        if isinstance(spec, (int, float)):
            return float(spec)
        return float(import_string(spec)(job.attempts))


def task_path(job: Any) -> str:
    """The import path of the task ``job`` runs: its args name it; a job inserted with a
    Task as its worker (``kathikon.insert(send_email, {"args": [...]})``) may leave it out."""
    path = job.args.get("task") if isinstance(job.args, dict) else None
    if path:
        return str(path)
    return "" if job.worker == TASK_WORKER else job.worker


def is_task_job(job: Any) -> bool:
    """Whether ``job`` runs a Django Task: enqueued by this backend, or its worker is a
    task's path (older jobs name :class:`TaskWorker` itself)."""
    if job.meta.get("task_backend") is not None or job.worker == TASK_WORKER:
        return True
    from kathikon.jobspec import worker_class  # here: the backend loads without the app

    try:
        return worker_class(job.worker)[1] is TaskWorker
    except Exception:  # not importable here: not known to be a task
        return False


def load_task(path: str) -> Any:
    """The Task object at ``path``; ``Discard`` (dead at once) when it cannot be imported.

    The ``Discard`` is chained from the reason: the ``ImportError``, or a ``TypeError``
    when ``path`` names something that is not a Task.
    """
    try:
        task = import_string(path)
    except ImportError as exc:
        raise Discard(f"task {path!r} cannot be imported: {exc}") from exc
    if not isinstance(task, compat.Task):
        reason = TypeError(f"{path!r} is not a Task (decorate the function with @task)")
        raise Discard(str(reason)) from reason
    return task


def task_result(job: Any, task: Any = None) -> Any:
    """The framework's ``TaskResult`` for a job of :class:`TaskWorker`.

    When the task no longer imports (a deploy renamed it), the result is ``FAILED``
    with an error that says why, unless the job had already completed; the job
    itself is discarded when a worker picks it up.
    """
    alias = job.meta.get("task_backend", "default")
    errors = [compat.TaskError(exception_class_path=read_kind(error.get("kind", "")),
                               traceback=error.get("traceback", "")) for error in job.errors]
    status = STATUS[job.state]
    if task is None:
        try:
            task = load_task(task_path(job))
        except Discard as gone:
            task = _stand_in(job, alias, gone)
            if job.state not in TERMINAL_STATES:
                status = compat.TaskResultStatus.FAILED
                cause = gone.__cause__ or gone
                errors.append(compat.TaskError(
                    exception_class_path=f"{type(cause).__module__}.{type(cause).__qualname__}",
                    traceback=str(gone)))
        else:
            task = _task_for(job, task, alias)
    else:
        task = _task_for(job, task, alias)
    terminal = job.state in TERMINAL_STATES
    result: Any = compat.TaskResult(
        task=task,
        id=job.id.hex,
        status=status,
        enqueued_at=job.inserted_at,
        started_at=first_started_at(job),
        last_attempted_at=job.started_at,
        finished_at=(job.completed_at or job.cancelled_at) if terminal else None,
        args=list(job.args.get("args") or []),
        kwargs=dict(job.args.get("kwargs") or {}),
        backend=alias,
        errors=errors,
        worker_ids=worker_ids(job),
    )
    if job.state == JobState.COMPLETED:
        object.__setattr__(result, "_return_value", job.result)
    return result


def first_started_at(job: Any) -> dt.datetime | None:
    """When the first attempt started: each failed attempt's error keeps its start."""
    starts = [job.started_at] if job.started_at else []
    for error in job.errors:
        start = error.get("started_at")
        if isinstance(start, str):
            try:
                starts.append(dt.datetime.fromisoformat(start))
            except ValueError:
                continue
    return min(starts, default=None)


def _stand_in(job: Any, alias: str, gone: Discard) -> Any:
    """A Task that names the missing path and raises ``gone`` if called."""
    path = str(job.args.get("task", ""))

    def missing(*args: Any, **kwargs: Any) -> Any:
        raise gone

    module, _, name = path.rpartition(".")
    missing.__module__, missing.__name__, missing.__qualname__ = module, name, name
    backend = alias if alias in compat.task_backends.settings else "default"
    try:
        return KathikonTask(func=missing, backend=backend, queue_name=job.queue,
                            priority=job.priority)
    except compat.InvalidTask:  # the backend no longer lists the job's queue
        return KathikonTask(func=missing, backend=backend, priority=job.priority)


def worker_ids(job: Any) -> list[str]:
    """One node name per attempt: from each failed attempt's error, else the latest node."""
    by_attempt = {error.get("attempt"): error.get("node") for error in job.errors}
    latest = job.attempted_by or ""
    return [by_attempt.get(attempt) or latest for attempt in range(1, job.attempts + 1)]


def _task_for(job: Any, task: Any, alias: str) -> Any:
    run_after = job.meta.get("run_after")
    changes = {"priority": job.priority, "queue_name": job.queue, "backend": alias,
               "run_after": dt.datetime.fromisoformat(run_after) if run_after else None}
    if all(getattr(task, name) == value for name, value in changes.items()):
        return task
    try:
        return dataclasses.replace(task, **changes)
    except Exception:  # the backend or queue is no longer configured: keep the task's own
        return task


def _option_problem(options: dict[str, Any]) -> str | None:
    attempts, timeout, backoff = (options.get(name) for name in OPTION_NAMES)
    if attempts is not None and (isinstance(attempts, bool) or not isinstance(attempts, int)
                                 or attempts < 1):
        return f"max_attempts must be an int >= 1, not {attempts!r}."
    if timeout is not None and (isinstance(timeout, bool)
                                or not isinstance(timeout, (int, float)) or timeout <= 0):
        return f"timeout must be a number of seconds > 0, not {timeout!r}."
    if backoff is not None and not isinstance(backoff, str) and (
            isinstance(backoff, bool) or not isinstance(backoff, (int, float)) or backoff < 0):
        return f"backoff must be seconds >= 0 or a dotted path to f(attempt), not {backoff!r}."
    return None


# Django's task signals, sent from Kathikon's (sender = the backend class). A snooze is
# neither a start nor a finish: the task stays READY and runs again later.

def _sender(job: Any) -> type:
    try:
        return type(compat.task_backends[job.meta.get("task_backend", "default")])
    except Exception:  # the alias is gone from settings.TASKS
        return KathikonBackend


def _send(signal: Any, job: Any, exception: BaseException | None = None) -> None:
    result = task_result(job)  # FAILED, saying why, if the task no longer imports
    if exception is None:
        signal.send(_sender(job), task_result=result)
        return
    try:  # Django's log receiver reads sys.exc_info() for the traceback
        raise exception
    except BaseException:
        signal.send(_sender(job), task_result=result)


def _on_inserted(sender: Any, job: Any, **kwargs: Any) -> None:
    _send(compat.task_enqueued, job)


def _on_started(sender: Any, job: Any, **kwargs: Any) -> None:
    _send(compat.task_started, job)


def _on_finished(sender: Any, job: Any, exception: BaseException | None = None,
                 **kwargs: Any) -> None:
    # Django sends task_finished once, with the finished result (SUCCESSFUL or FAILED).
    # A failed attempt with a retry due, or a rescue that puts the job back to available,
    # leaves the task READY: it has not finished, so nothing is sent.
    if job.state not in TERMINAL_STATES:
        return
    _send(compat.task_finished, job, exception)


signals.job_inserted.connect(_on_inserted, sender=TaskWorker, dispatch_uid="kathikon.tasks.ins")
signals.job_started.connect(_on_started, sender=TaskWorker, dispatch_uid="kathikon.tasks.start")
for _signal in (signals.job_completed, signals.job_failed, signals.job_discarded,
                signals.job_cancelled, signals.job_rescued):
    _signal.connect(_on_finished, sender=TaskWorker, dispatch_uid="kathikon.tasks.finish")

__all__ = ["STATUS", "KathikonBackend", "KathikonTask", "TaskWorker", "task_result"]
