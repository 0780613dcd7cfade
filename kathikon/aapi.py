"""Async twins of the public API, for async views and consumers: ``a`` + the sync name.

    async def signup(request):
        user = await create_user(request)
        await kathikon.ainsert(SendWelcome, {"user_id": user.pk})
        return JsonResponse({"ok": True})

Each twin runs its sync function with ``sync_to_async(thread_sensitive=True)``,
as Django's own async ORM methods do: same arguments, same return values, same
exceptions, and an insert inside ``transaction.atomic()`` (entered in a sync
function) stays part of that transaction.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any

from asgiref.sync import sync_to_async

from kathikon import api, runners


def _twin(func: Callable[..., Any]) -> Callable[..., Coroutine[Any, Any, Any]]:
    @functools.wraps(func)
    async def twin(*args: Any, **kwargs: Any) -> Any:
        return await sync_to_async(func, thread_sensitive=True)(*args, **kwargs)

    twin.__name__ = twin.__qualname__ = f"a{func.__name__}"
    twin.__doc__ = f"Async twin of :func:`kathikon.{func.__name__}`. {func.__doc__ or ''}"
    return twin


ainsert = _twin(api.insert)
aset_queue_limits = _twin(api.set_queue_limits)
ainsert_many = _twin(api.insert_many)
afetch = _twin(api.fetch)
aall = _twin(api.all)
acancel = _twin(api.cancel)
aretry = _twin(api.retry)
arerun = _twin(api.rerun)
adead_jobs = _twin(api.dead_jobs)
astatus = _twin(api.status)
ahistory = _twin(api.history)
aclaim = _twin(api.claim)
aclaim_available = _twin(api.claim_available)
astart_queue = _twin(api.start_queue)
apause_queue = _twin(api.pause_queue)
aresume_queue = _twin(api.resume_queue)
aschedule = _twin(api.schedule)
acomplete = _twin(runners.complete)
afail = _twin(runners.fail)
adiscard = _twin(runners.discard)
asnooze = _twin(runners.snooze)

__all__ = [
    "aall", "acancel", "aclaim", "aclaim_available", "acomplete", "adead_jobs", "adiscard",
    "afail", "afetch", "ahistory", "ainsert", "ainsert_many", "apause_queue", "arerun",
    "aresume_queue", "aretry", "aschedule", "aset_queue_limits", "asnooze", "astart_queue",
    "astatus",
]
