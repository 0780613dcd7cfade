"""Internal: the event loop a worker process owns for ``async def perform`` jobs.

One loop per process, in a daemon thread, started on first use: async jobs
from every dispatcher run on it concurrently, never on a new loop per job.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any

from asgiref.sync import SyncToAsync, ThreadSensitiveContext, sync_to_async
from django.db import connections

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_pid = 0


def get_loop() -> asyncio.AbstractEventLoop:
    global _loop, _pid
    with _lock:
        # A forked child (kathikon_worker --processes) inherits the loop object but not
        # its thread: it must start its own, or every async job would wait forever.
        if _loop is None or _loop.is_closed() or _pid != os.getpid():
            _loop, _pid = asyncio.new_event_loop(), os.getpid()
            thread = threading.Thread(target=_loop.run_forever, name="kathikon-async",
                                      daemon=True)
            thread.start()
        return _loop


def run_coroutine(coro: Coroutine[Any, Any, Any], timeout: float | None) -> Any:
    """Run ``coro`` on the process loop and wait for it; ``JobTimeout`` after ``timeout``.

    Each job gets its own thread-sensitive context, as Django gives each ASGI
    request: the async ORM calls of one job share one thread and connection,
    which is closed when the job ends (not after a timeout: a stuck ORM call
    must not hold the slot; that thread is abandoned like a timed-out sync job).
    """
    from kathikon.executor import JobTimeout

    async def guarded() -> Any:
        async with ThreadSensitiveContext() as context:
            try:
                if timeout is None:
                    value = await coro
                else:
                    value = await asyncio.wait_for(coro, timeout)
            except asyncio.TimeoutError:
                raise JobTimeout(f"timed out after {timeout}s") from None
            except BaseException:
                await _close_connections(context)
                raise
            await _close_connections(context)
            return value

    return asyncio.run_coroutine_threadsafe(guarded(), get_loop()).result()


async def _close_connections(context: ThreadSensitiveContext) -> None:
    executors = getattr(SyncToAsync, "context_to_thread_executor", None)
    if executors is not None and context not in executors:
        return  # the job made no thread-sensitive calls, so it opened no connection
    await sync_to_async(connections.close_all, thread_sensitive=True)()
