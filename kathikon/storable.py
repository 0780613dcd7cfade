"""Outcomes every supported database accepts, made so where ``perform`` ends (pure, no ORM).

An outcome the database refuses must never reach the acker: it would fail the
whole ack batch. So, before anything is written:

- error messages and tracebacks have NUL and lone surrogates replaced with
  U+FFFD and are capped (``MAX_MESSAGE`` / ``MAX_TRACEBACK`` characters),
  keeping their head and their tail;
- a result must be JSON without NaN or infinities, without NUL or lone
  surrogates in its strings, nested at most ``MAX_RESULT_DEPTH`` deep and at
  most ``MAX_RESULT_BYTES`` once encoded. :func:`storable_result` raises
  ``UnstorableOutcome`` for any other (``complete_in_transaction`` turns it into
  ``InvalidJob``); :func:`result_or_marker` gives the marker the executor stores
  instead, because ``perform``'s work is done and must not run again for it::

      {"kathikon_unstored": {"reason": "not_json", "type": "builtins.set",
                             "message": "the result cannot be stored: it is not JSON (…)"}}

  ``reason`` is one of ``REASONS``; ``type`` is the class path of the value
  ``perform`` returned; ``message`` says why in words (at most ``MAX_MARKER_MESSAGE``
  characters);
- delays are clamped to ``0 .. MAX_DELAY`` seconds (``Retry`` and ``Snooze``
  refuse NaN, infinities and negative numbers when built).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from kathikon.exceptions import UnstorableOutcome, shown

#: Longest error message kept in ``job.errors`` (characters; head and tail kept).
MAX_MESSAGE = 8_000
#: Longest traceback kept in ``job.errors`` (characters; head and tail kept).
MAX_TRACEBACK = 32_000
#: Largest result stored (bytes of its JSON encoding).
MAX_RESULT_BYTES = 1_000_000
#: Deepest nesting of dicts and lists in args, meta or a result (the top level counts):
#: MariaDB's JSON_VALID refuses 32 levels, so every database refuses them alike.
MAX_JSON_DEPTH = 31
#: What a result may nest: the rule for what goes in (args) holds for what comes out.
MAX_RESULT_DEPTH = MAX_JSON_DEPTH
#: The key of the marker stored as ``job.result`` in place of a result that cannot be stored.
UNSTORED = "kathikon_unstored"
#: Why a result was not stored (the marker's ``reason``); ``refused``: the database refused
#: what passed these checks (see kathikon.runtime.acker).
REASONS = ("not_json", "bad_text", "too_deep", "too_large", "refused")
#: Longest ``message`` of the marker (characters; head and tail kept).
MAX_MARKER_MESSAGE = 1_000
#: The largest value an integer column holds, and a claim binds, on every database
#: (max_attempts, limits; SQLite refuses integers past 64 bits, MariaDB's INT stops here).
MAX_INT = 2**31 - 1
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
    stored, refusal = _stored_form(result)
    if refusal is not None:
        raise UnstorableOutcome(refusal[1])
    return stored


def result_or_marker(result: Any) -> tuple[Any, UnstorableOutcome | None]:
    """What to store as the result of work that is done: the result as stored, or, with the
    error that says why, the marker that replaces a result no database would take the same way.
    """
    stored, refusal = _stored_form(result)
    if refusal is None:
        return stored, None
    reason, message = refusal
    return unstored_marker(result, reason, message), UnstorableOutcome(message)


def unstored_marker(result: Any, reason: str, message: str) -> dict[str, Any]:
    """The marker stored in place of ``result`` (module doc); storable by construction."""
    kind = type(result)
    return {UNSTORED: {
        "reason": reason,
        "type": clean_text(f"{kind.__module__}.{kind.__qualname__}", 255),
        "message": clean_text(message, MAX_MARKER_MESSAGE),
    }}


def _stored_form(result: Any) -> tuple[Any, tuple[str, str] | None]:
    """``(the result as stored, None)``, or ``(None, (reason, message))`` when it cannot be."""
    try:
        encoded = json.dumps(result, allow_nan=False)
    except RecursionError:
        return None, ("too_deep", _too_deep())
    except MemoryError:
        return None, ("too_large", "the result cannot be stored: it is too large to encode")
    except Exception as exc:  # TypeError, ValueError; or a container that raises when read
        return None, ("not_json", f"the result cannot be stored: it is not JSON "
                                  f"({describe(exc)})")
    if len(encoded) > MAX_RESULT_BYTES:  # ensure_ascii: characters are bytes
        return None, ("too_large", f"the result cannot be stored: {len(encoded)} bytes of "
                                   f"JSON, more than the {MAX_RESULT_BYTES} bytes allowed")
    try:
        decoded = json.loads(encoded)
    except RecursionError:
        return None, ("too_deep", _too_deep())
    # Brackets inside strings count too: only a cheap test before the exact one. First, so
    # the (recursive) text check below never walks a value nested deeper than this.
    if nests_too_deep(decoded, encoded):
        return None, ("too_deep", _too_deep())
    # json.dumps escapes every non-ASCII character: only then can a string hold NUL or a
    # lone surrogate, which PostgreSQL's jsonb and MariaDB's JSON refuse.
    if ("\\u0000" in encoded or "\\ud" in encoded) and _holds_unstorable(decoded):
        return None, ("bad_text", "the result cannot be stored: a string in it holds NUL "
                                  "(\\x00) or a lone surrogate")
    return decoded, None


def _too_deep() -> str:
    return (f"the result cannot be stored: it is nested more than {MAX_RESULT_DEPTH} levels "
            "deep (dicts and lists; MariaDB refuses deeper JSON, so every database does)")


def nests_too_deep(value: Any, text: str) -> bool:
    """Whether dicts and lists (tuples too, before a JSON round trip) nest in ``value``
    more than ``MAX_JSON_DEPTH`` deep. ``text`` is its JSON: fewer brackets than that
    (brackets in strings count too) answers at once; else an iterative walk."""
    if text.count("{") + text.count("[") <= MAX_JSON_DEPTH:
        return False
    stack = [(value, 1)] if isinstance(value, (dict, list, tuple)) else []
    while stack:
        item, level = stack.pop()
        if level > MAX_JSON_DEPTH:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, level + 1) for child in children
                     if isinstance(child, (dict, list, tuple)))
    return False


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
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return None
    if isinstance(seconds, float) and math.isnan(seconds):  # isnan(10**400) overflows
        return None
    if seconds < 0:
        return 0.0
    return MAX_DELAY if seconds > MAX_DELAY else seconds


def valid_delay(seconds: object, what: str) -> float:
    """Validate a delay given to ``Retry``/``Snooze``: a number >= 0, not NaN nor infinite.

    Returns it clamped to ``MAX_DELAY``; ``ValueError`` otherwise.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ValueError(f"{what} needs a number of seconds, not {shown(seconds)}")
    if (isinstance(seconds, float) and not math.isfinite(seconds)) or seconds < 0:
        raise ValueError(f"{what} needs a finite number of seconds >= 0, not {shown(seconds)}")
    return MAX_DELAY if seconds > MAX_DELAY else seconds
