"""Internal: job ids — time-ordered UUIDs (version 7) shown as hex strings."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def new_id() -> uuid.UUID:
    """A UUIDv7: 48 bits of milliseconds, a 12-bit per-process counter, 62 random bits.

    Ids made in one process are strictly increasing; ids from different hosts
    are ordered by millisecond and unique by their random bits.
    """
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms > _last_ms:
            _last_ms, _counter = ms, 0
        else:
            _counter += 1
            if _counter > 0xFFF:  # more than 4096 ids in one millisecond: borrow the next one
                _last_ms, _counter = _last_ms + 1, 0
        ms, counter = _last_ms, _counter
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms << 80) | (0x7 << 76) | (counter << 64) | (0b10 << 62) | rand
    return uuid.UUID(int=value)


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
