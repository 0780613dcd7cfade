"""Django Tasks the ecosystem tests enqueue (module level, as the framework requires)."""

from __future__ import annotations

import asyncio
import time

import kathikon
from kathikon.compat import task


@task
def add(a, b):
    return a + b


@task(queue_name="emails", priority=10)
def send_email(to, subject="hi"):
    return {"to": to, "subject": subject}


@task
async def async_add(a, b):
    await asyncio.sleep(0.01)
    return a + b


@task(takes_context=True)
def with_context(context, label):
    return {"attempt": context.attempt, "id": context.task_result.id, "label": label}


@task(max_attempts=2, backoff=0)
def always_fails(message):
    raise ValueError(message)


@task(takes_context=True, max_attempts=3, backoff=0)
def flaky(context):
    if context.attempt < 2:
        raise RuntimeError(f"flaky attempt {context.attempt}")
    return context.attempt


@task(timeout=0.3, max_attempts=1)
def slow_sync(seconds):
    time.sleep(seconds)
    return "done"


@task(timeout=0.3, max_attempts=1)
async def slow_async(seconds):
    await asyncio.sleep(seconds)
    return "done"


@task
def returns_object():
    return object()


@task
def plain():
    return None


_snoozed: set[str] = set()


@task(takes_context=True)
def snoozes_once(context):
    """Snoozes on its first run (the attempt is not counted), returns on the next."""
    if context.task_result.id not in _snoozed:
        _snoozed.add(context.task_result.id)
        return kathikon.Snooze(60)
    return "woke"


@task(takes_context=True, max_attempts=3, backoff=0)
def discards(context):
    if context.attempt < 2:
        raise RuntimeError("attempt 1 fails, a retry follows")
    raise kathikon.Discard("attempt 2 gives up")
