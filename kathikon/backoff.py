"""Retry delays: pure functions, no ORM.

``backoff_seconds`` spaces a job's retries; ``failure_delay`` spaces the runtime's own
retries after a database error (claims, acks, periodic services, LISTEN, start-up).
"""

from __future__ import annotations

import random

BASE_SECONDS = 5
MAX_SECONDS = 24 * 3600


def backoff_seconds(attempt: int) -> int:
    """Exponential delay before retry number ``attempt``: ``5 * 2**attempt``, capped at a day.

    >>> backoff_seconds(2)
    20
    """
    attempt = max(0, int(attempt))
    if attempt >= 15:  # 5 * 2**15 is already past the cap; avoid huge ints
        return MAX_SECONDS
    return min(BASE_SECONDS * 2**attempt, MAX_SECONDS)


def with_jitter(seconds: float, *, spread: float = 0.1, rng: random.Random | None = None) -> float:
    """``seconds`` plus up to ``spread`` of itself at random, so retries of many jobs spread out."""
    if seconds <= 0:
        return 0.0
    return seconds + (rng or random).uniform(0, seconds * spread)


def failure_delay(failures: int, *, base: float, cap: float) -> float:
    """Seconds to wait after ``failures`` failures in a row: ``base * 2**failures``, up to ``cap``.

    >>> [failure_delay(n, base=0.1, cap=1.0) for n in (0, 1, 2, 3, 4, 50)]
    [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    """
    return min(base * 2.0 ** min(max(0, failures), 64), cap)
