"""Outcomes every supported database accepts, made so where ``perform`` ends (pure, no ORM).

An outcome the database refuses must never reach the acker: it would fail the
whole ack batch. So, before anything is written:

- error messages and tracebacks have NUL and lone surrogates replaced with
  U+FFFD and are capped (``MAX_MESSAGE`` / ``MAX_TRACEBACK`` characters),
  keeping their head and their tail;
- a result must be JSON without NaN or infinities, without NUL or lone
  surrogates in its strings, and at most ``MAX_RESULT_BYTES`` once encoded;
  otherwise :func:`storable_result` raises ``UnstorableOutcome`` (the attempt
  fails with that error, on every database alike);
- delays are clamped to ``0 .. MAX_DELAY`` seconds (``Retry`` and ``Snooze``
  refuse NaN, infinities and negative numbers when built).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from kathikon.exceptions import UnstorableOutcome

#: Longest error message kept in ``job.errors`` (characters; head and tail kept).
MAX_MESSAGE = 8_000
#: Longest traceback kept in ``job.errors`` (characters; head and tail kept).
MAX_TRACEBACK = 32_000
#: Largest result stored (bytes of its JSON encoding).
MAX_RESULT_BYTES = 1_000_000
#: Longest delay of a retry or a snooze: 365 days (longer ones are clamped to it).
MAX_DELAY = 365 * 24 * 3600.0

_UNSTORABLE_CHARS = re.compile("[\x00\ud800-\udfff]")


def clean_text(text: str, limit: int) -> str:
    """``text`` with NUL and lone surrogates replaced, cut to ``limit`` keeping head and tail."""
    if len(text) > limit:  # cut first: a huge message is not scanned whole
        keep = max(0, limit - 48)  # room for the marker
        marker = f"\n[… {len(text) - keep} characters cut …]\n"
        head = keep // 2
        text = text[:head] + marker + text[len(text) - (keep - head):]
    return _UNSTORABLE_CHARS.sub("\ufffd", text)


def describe(exc: BaseException) -> str:
    """``str(exc)``, or a placeholder when the exception's ``__str__`` itself fails."""
    try:
        return str(exc)
    except Exception:
        return f"<unprintable {type(exc).__name__}>"


def storable_result(result: Any) -> Any:
    """The result as the database stores it (JSON round trip); ``UnstorableOutcome`` if it
    cannot be stored the same way on every database."""
    try:
        encoded = json.dumps(result, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise UnstorableOutcome(f"the result cannot be stored: it is not JSON ({exc})") from None
    if len(encoded) > MAX_RESULT_BYTES:  # ensure_ascii: characters are bytes
        raise UnstorableOutcome(f"the result cannot be stored: {len(encoded)} bytes of JSON, "
                                f"more than the {MAX_RESULT_BYTES} bytes allowed")
    decoded = json.loads(encoded)
    # json.dumps escapes every non-ASCII character: only then can a string hold NUL or a
    # lone surrogate, which PostgreSQL's jsonb and MariaDB's JSON refuse.
    if ("\\u0000" in encoded or "\\ud" in encoded) and _holds_unstorable(decoded):
        raise UnstorableOutcome("the result cannot be stored: a string in it holds NUL "
                                "(\\x00) or a lone surrogate")
    return decoded


def _holds_unstorable(value: Any) -> bool:
    if isinstance(value, str):
        return _UNSTORABLE_CHARS.search(value) is not None
    if isinstance(value, dict):
        return any(_holds_unstorable(k) or _holds_unstorable(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_unstorable(item) for item in value)
    return False


def clamp_delay(seconds: object) -> float | None:
    """A delay in ``0 .. MAX_DELAY`` (infinities clamped); ``None`` for NaN or a non-number."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or math.isnan(seconds):
        return None
    if seconds < 0:
        return 0.0
    return MAX_DELAY if seconds > MAX_DELAY else seconds


def valid_delay(seconds: object, what: str) -> float:
    """Validate a delay given to ``Retry``/``Snooze``: a number >= 0, not NaN nor infinite.

    Returns it clamped to ``MAX_DELAY``; ``ValueError`` otherwise.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ValueError(f"{what} needs a number of seconds, not {seconds!r}")
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise ValueError(f"{what} needs a finite number of seconds >= 0, not {seconds!r}")
    return MAX_DELAY if seconds > MAX_DELAY else seconds
