"""Internal: the event loop a worker process owns for ``async def perform`` jobs.

One loop per process, in a daemon thread, started on first use: async jobs
from every executor thread run on it concurrently, never on a new loop per job.

The loop is shared, so no job may end it: ``SystemExit``, ``KeyboardInterrupt``
and any other ``BaseException`` a coroutine raises are carried back to the
job's executor thread (and recorded with their real class) instead of
propagating through the loop. If the loop thread ends anyway (a callback
raised ``SystemExit``, user code stopped the loop), every job waiting on it
fails with ``EventLoopDied`` and the next async job starts a new loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import Coroutine
from typing import Any

from asgiref.sync import SyncToAsync, ThreadSensitiveContext, sync_to_async
from django.db import connections

from kathikon.exceptions import EventLoopDied
from kathikon.runtime.threads import new_thread

logger = logging.getLogger("kathikon.runtime")

WATCH_EVERY = 0.5  # seconds between checks that the loop still runs, while a job waits on it
CANCEL_WITHIN = 2.0  # seconds an ended loop gives its jobs' coroutines to unwind


class ProcessLoop:
    """An event loop and the thread that runs it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()
        self.thread = new_thread(self._run, name="kathikon-async")

    def start(self) -> ProcessLoop:
        self.thread.start()
        return self

    @property
    def alive(self) -> bool:
        # A forked child (kathikon_worker --processes) inherits the loop object but not
        # its thread: it must start its own, or every async job would wait forever.
        return self.pid == os.getpid() and self.thread.is_alive() and not self.loop.is_closed()

    def _run(self) -> None:
        try:
            self.loop.run_forever()
        except BaseException as exc:  # the thread ends: jobs waiting on it see it is gone
            logger.error("kathikon: the event loop ended with %s.%s: %s; its jobs fail and the "
                         "next async job starts a new loop", type(exc).__module__,
                         type(exc).__qualname__, exc)
        else:
            logger.error("kathikon: the event loop was stopped by a job; its jobs fail and the "
                         "next async job starts a new loop")
        self._cancel_leftovers()

    def _cancel_leftovers(self) -> None:
        """Cancel the tasks the loop left behind, so each job's coroutine unwinds in its own
        context (closing its connections) and its executor thread stops waiting."""
        try:
            tasks = asyncio.all_tasks(self.loop)
            for task in tasks:
                task.cancel()
            if tasks:
                self.loop.run_until_complete(asyncio.wait(tasks, timeout=CANCEL_WITHIN))
        except BaseException:
            logger.exception("kathikon: cancelling the jobs of the ended event loop failed")


_lock = threading.Lock()
_current: ProcessLoop | None = None


def process_loop() -> ProcessLoop:
    """The running process loop; a new one if there is none or the last one died."""
    global _current
    with _lock:
        if _current is None or not _current.alive:
            if _current is not None and _current.pid == os.getpid():
                logger.warning("kathikon: restarting the event loop")
            _current = ProcessLoop().start()
        return _current


def revive() -> bool:
    """Start a new loop now if this process's loop has ended (the worker's health check
    calls it, so the next async job does not pay for the restart); ``True`` if it did."""
    with _lock:
        ended = _current is not None and _current.pid == os.getpid() and not _current.alive
    if ended:
        process_loop()
    return ended


def get_loop() -> asyncio.AbstractEventLoop:
    return process_loop().loop


class _Raised:
    """A ``BaseException`` that left a job's coroutine, carried out of the loop as a value."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def run_coroutine(coro: Coroutine[Any, Any, Any], timeout: float | None) -> Any:
    """Run ``coro`` on the process loop and wait for it; ``JobTimeout`` after ``timeout``.

    Each job gets its own thread-sensitive context, as Django gives each ASGI
    request: the async ORM calls of one job share one thread and connection,
    which is closed when the job ends (not after a timeout: a stuck ORM call
    must not hold the slot; that thread is abandoned like a timed-out sync job).
    """
    from kathikon.exceptions import JobTimeout

    async def guarded() -> Any:
        async with ThreadSensitiveContext() as context:
            try:
                if timeout is None:
                    value = await coro
                else:
                    value = await asyncio.wait_for(coro, timeout)
            except asyncio.TimeoutError:
                raise JobTimeout(f"timed out after {timeout}s") from None
            except asyncio.CancelledError:
                await _close_connections(context)
                raise
            except BaseException as exc:  # the loop is shared: nothing may end it
                await _close_connections(context)
                return _Raised(exc)
            await _close_connections(context)
            return value

    runner = process_loop()
    future = asyncio.run_coroutine_threadsafe(guarded(), runner.loop)
    while not concurrent.futures.wait([future], WATCH_EVERY).done:
        if not runner.alive:
            future.cancel()
            break
    if future.cancelled() or (not runner.alive and not future.done()):
        raise EventLoopDied("the event loop ended while this job ran (a job stopped it or "
                            "raised from a callback); the next async job starts a new one")
    value = future.result()
    if isinstance(value, _Raised):
        raise value.exc
    return value


async def _close_connections(context: ThreadSensitiveContext) -> None:
    executors = getattr(SyncToAsync, "context_to_thread_executor", None)
    if executors is not None and context not in executors:
        return  # the job made no thread-sensitive calls, so it opened no connection
    await sync_to_async(connections.close_all, thread_sensitive=True)()
