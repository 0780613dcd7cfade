"""Internal: job ids — time-ordered UUIDs (version 7) shown as hex strings."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator

_lock = threading.Lock()
_last_ms = 0
_counter = 0


_RANDOM_BITS = (1 << 62) - 1


def new_id() -> uuid.UUID:
    """A UUIDv7: 48 bits of milliseconds, a 12-bit per-process counter, 62 random bits.

    Ids made in one process are strictly increasing; ids from different hosts
    are ordered by millisecond and unique by their random bits.
    """
    with _lock:
        stamp = _next_stamp(time.time_ns() // 1_000_000)
    return uuid.UUID(int=stamp | (int.from_bytes(os.urandom(8), "big") & _RANDOM_BITS))


def new_ids(count: int) -> list[uuid.UUID]:
    """``count`` ids as ``new_id`` makes them, for one lock and one read of the OS's
    randomness in all (``insert_many`` takes thousands at a time)."""
    with _lock:
        ms = time.time_ns() // 1_000_000
        stamps = [_next_stamp(ms) for _ in range(count)]
    noise = os.urandom(8 * count)
    return [uuid.UUID(int=stamp | (int.from_bytes(noise[8 * i:8 * i + 8], "big") & _RANDOM_BITS))
            for i, stamp in enumerate(stamps)]


def _next_stamp(ms: int) -> int:
    """The id's bits but the random ones, for the clock reading ``ms``; hold ``_lock``."""
    global _last_ms, _counter
    if ms > _last_ms:
        _last_ms, _counter = ms, 0
    else:
        _counter += 1
        if _counter > 0xFFF:  # more than 4096 ids in one millisecond: borrow the next one
            _last_ms, _counter = _last_ms + 1, 0
    return (_last_ms << 80) | (0x7 << 76) | (_counter << 64) | (0b10 << 62)


def id_stream(batch: int = 512) -> Iterator[uuid.UUID]:
    """Fresh ids without end, made ``batch`` at a time (for an unknown number of rows)."""
    while True:
        yield from new_ids(batch)


def parse_id(value: object) -> uuid.UUID | None:
    """The UUID a user passed as hex string, dashed string or UUID; ``None`` if malformed."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value.strip())
        except ValueError:
            return None
    return None
