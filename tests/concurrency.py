"""Run one piece of work in several threads at once, each with its own connection."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connections


def run_at_once(work: Callable[[int], None], threads: int, timeout: float = 60) -> None:
    """Call ``work(0)`` … ``work(threads - 1)``, each in its own thread, released together.

    Every thread closes its connections when done; a thread still running after
    ``timeout`` or any exception a thread raised fails the test.
    """
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def run(slot: int) -> None:
        try:
            start.wait()
            work(slot)
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
