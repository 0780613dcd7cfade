"""Run one piece of work in several threads at once, each with its own connection."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from django.db import connections

T = TypeVar("T")


def run_at_once(work: Callable[[int], T], threads: int, timeout: float = 60) -> list[T | None]:
    """Call ``work(0)`` … ``work(threads - 1)``, each in its own thread, released together,
    and return what each call returned, by slot.

    Every thread closes its connections when done; a thread still running after
    ``timeout`` or any exception a thread raised fails the test.
    """
    errors: list[BaseException] = []
    results: list[T | None] = [None] * threads
    start = threading.Barrier(threads)

    def run(slot: int) -> None:
        try:
            start.wait()
            results[slot] = work(slot)
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connections.close_all()

    pool = [threading.Thread(target=run, args=(slot,)) for slot in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in pool), f"a thread ran over {timeout}s"
    assert not errors, errors[:3]
    return results
