"""Internal: the hand-over from a queue's dispatcher to its executor threads.

A plain queue wakes one waiting thread per job put. With a buffer of
microsecond jobs and a hundred threads, that wakes every idle thread for each
claim: each takes a job or two and sleeps again, about one context switch per
job. Here the dispatcher says how many threads to wake for a hand-over (the
pool works it out from its jobs' mean run time), threads that are awake keep
taking jobs until the inbox is empty, and the pool's watchdog wakes more
(:meth:`Inbox.wake`) while jobs wait behind one that runs slow.
"""

from __future__ import annotations

import collections
import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class Inbox(Generic[T]):
    """A FIFO of items for a set of worker threads that wakes only as many as asked."""

    def __init__(self) -> None:
        self._items: collections.deque[T] = collections.deque()
        self._ready = threading.Condition(threading.Lock())
        self._waiting = 0
        self.wakeups = 0  # threads woken so far (a statistic)

    def put(self, items: list[T], wake: int | None = None) -> None:
        """Add ``items``; wake up to ``wake`` waiting threads (default: one per item)."""
        if not items:
            return
        with self._ready:
            self._items.extend(items)
            count = len(items) if wake is None else max(1, wake)
            self._notify(count)

    def get(self) -> T:
        """The next item; blocks while there is none."""
        with self._ready:
            while not self._items:
                self._waiting += 1
                try:
                    self._ready.wait()
                finally:
                    self._waiting -= 1
            return self._items.popleft()

    def wake(self, count: int) -> None:
        """Wake up to ``count`` idle threads if items are waiting."""
        with self._ready:
            if self._items:
                self._notify(count)

    def _notify(self, count: int) -> None:
        count = min(count, self._waiting)  # the lock is held
        if count:
            self.wakeups += count
            self._ready.notify(count)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def waiting(self) -> int:
        """Threads waiting for an item."""
        with self._ready:
            return self._waiting
