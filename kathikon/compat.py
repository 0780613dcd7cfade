"""Internal: one import point for Django's Tasks framework, built in or backported.

Django 6.0+ ships ``django.tasks``; on Django 5.2 the ``django-tasks`` backport
(``pip install "kathikon[tasks]"``, version 0.12 or later) provides the same API
as ``django_tasks``. ``kathikon.backends`` imports everything it needs from here.
``AVAILABLE`` is False when neither is installed, or the backport is too old.
"""

from __future__ import annotations

from typing import Any

#: The worker that runs Django Tasks (kathikon.backends). A job of a task holds the task's
#: import path as its worker, so every list, filter, summary and log line names the task;
#: that path resolves to this class (named by path: it needs the framework, this does not).
TASK_WORKER = "kathikon.backends.TaskWorker"

try:  # Django >= 6.0
    from django.tasks import (
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
    from django.tasks.signals import task_enqueued, task_finished, task_started

    SOURCE = "django.tasks"
except ImportError:
    try:  # Django 5.2 with the django-tasks backport (>= 0.12: TaskResultStatus.SUCCESSFUL)
        from django_tasks import (  # type: ignore[no-redef]
            DEFAULT_TASK_QUEUE_NAME,
            TaskContext,
            TaskResult,
            TaskResultStatus,
            task,
            task_backends,
        )
        from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef]
        from django_tasks.base import Task, TaskError  # type: ignore[no-redef]
        from django_tasks.exceptions import (  # type: ignore[no-redef]
            TaskResultDoesNotExist,
            TaskResultMismatch,
        )
        from django_tasks.signals import (  # type: ignore[no-redef]
            task_enqueued,
            task_finished,
            task_started,
        )

        # Older than 0.12 (READY/RUNNING/FAILED/COMPLETE): not the API the backend speaks.
        SOURCE = "django_tasks" if hasattr(TaskResultStatus, "SUCCESSFUL") else ""
    except ImportError:
        SOURCE = ""
    else:  # its own try: the backport renames InvalidTaskError to InvalidTask, as Django did
        try:
            from django_tasks.exceptions import InvalidTask  # type: ignore[no-redef]
        except ImportError:
            from django_tasks.exceptions import (  # type: ignore[no-redef]
                InvalidTaskError as InvalidTask,
            )

AVAILABLE = bool(SOURCE)


def normalize_json(value: Any) -> Any:
    """The framework's JSON normalisation (tuples become lists; ``TypeError`` if not JSON)."""
    if SOURCE == "django.tasks":
        from django.utils.json import normalize_json as normalize
    else:
        from django_tasks.utils import normalize_json as normalize  # type: ignore[no-redef]
    return normalize(value)


__all__ = [
    "AVAILABLE",
    "DEFAULT_TASK_QUEUE_NAME",
    "SOURCE",
    "TASK_WORKER",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
