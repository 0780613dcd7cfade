"""Fixtures for the operations tests: jobs in every state, users with chosen permissions."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

import kathikon
from kathikon.models import Job
from kathikon.states import JobState
from tests import workers


def make_job(*, worker: Any = workers.Succeed, args: dict[str, Any] | None = None,
             state: str = JobState.AVAILABLE, queue: str = "default",
             errors: list[dict[str, Any]] | None = None, finished_ago: float | None = None,
             attempts: int = 0, **fields: Any) -> Job:
    """Insert through the public API, then put the row in the wanted state (test set-up only)."""
    job = kathikon.insert(worker, args or {}, queue=queue)
    now = timezone.now()
    changes: dict[str, Any] = {"state": state, "attempts": attempts, **fields}
    if errors is not None:
        changes["errors"] = errors
    if state in (JobState.COMPLETED, JobState.DEAD, JobState.CANCELLED):
        changes["completed_at"] = now - dt.timedelta(seconds=finished_ago or 0)
        if state == JobState.CANCELLED:
            changes["cancelled_at"] = changes["completed_at"]
    if state in (JobState.CLAIMED, JobState.RUNNING):
        changes.setdefault("started_at", now)
        changes.setdefault("attempted_by", "node-1")
    Job.objects.filter(pk=job.pk).update(**changes)
    job.refresh_from_db()
    return job


def error(kind: str = "builtins.RuntimeError", message: str = "boom",
          at: dt.datetime | None = None, attempt: int = 1) -> dict[str, Any]:
    return {"attempt": attempt, "at": (at or timezone.now()).isoformat(), "kind": kind,
            "message": message,
            "traceback": f'Traceback (most recent call last):\n  File "w.py", line 3\n'
                         f"{kind}: {message}\n"}


@pytest.fixture
def job_factory(db: Any) -> Any:
    return make_job


@pytest.fixture
def mixed_jobs(db: Any) -> dict[str, Job]:
    """One job per interesting state across two queues."""
    old = timezone.now() - dt.timedelta(minutes=5)
    return {
        "available": make_job(available_at=old),
        "scheduled": make_job(state=JobState.SCHEDULED,
                              available_at=timezone.now() + dt.timedelta(hours=1)),
        "running": make_job(state=JobState.RUNNING, attempts=1),
        "completed": make_job(state=JobState.COMPLETED, attempts=1, finished_ago=10),
        "completed_old": make_job(state=JobState.COMPLETED, attempts=1, finished_ago=7200),
        "dead": make_job(worker=workers.Explode, state=JobState.DEAD, attempts=3,
                         errors=[error(message="first", attempt=1),
                                 error(message="boom 3", attempt=3)], finished_ago=30),
        "retryable": make_job(worker=workers.Explode, state=JobState.RETRYABLE, attempts=1,
                              errors=[error(kind="builtins.ValueError", message="bad value")],
                              available_at=timezone.now() + dt.timedelta(seconds=30)),
        "emails": make_job(worker=workers.Emails, queue="emails", state=JobState.DEAD,
                           attempts=4, errors=[error(kind="smtplib.SMTPError", message="421")],
                           finished_ago=600),
        "cancelled": make_job(state=JobState.CANCELLED, finished_ago=60),
    }


def staff_user(username: str, *codenames: str) -> Any:
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="kathikon",
                                                        codename__in=codenames))
    return user


VIEW_ALL = ("view_job", "view_queue", "view_cronschedule", "view_batch", "view_node")


@pytest.fixture
def admin_client_op(db: Any, client: Any) -> Any:
    from django.contrib.auth.models import User

    User.objects.create_superuser("root", "root@example.com", "pw")
    client.login(username="root", password="pw")
    return client


@pytest.fixture
def viewer_client(db: Any) -> Any:
    from django.test import Client

    staff_user("viewer", *VIEW_ALL)
    client = Client()
    client.login(username="viewer", password="pw")
    return client


@pytest.fixture(autouse=True)
def fast_password_hasher(settings: Any) -> None:
    """Logging users in with the default PBKDF2 costs a second per test on a busy machine."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
