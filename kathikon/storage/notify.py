"""Internal: PostgreSQL NOTIFY payloads that wake idle dispatchers at once.

One channel, ``kathikon``; the payload is ``"<event> <queue>"`` with event
``available`` (jobs became claimable), ``pause`` or ``resume``. NOTIFY is
transactional: sent inside the caller's transaction, it is delivered on commit
and dropped on rollback. PostgreSQL folds identical payloads in one
transaction, so a bulk insert wakes each queue once.
"""

from __future__ import annotations

from collections.abc import Iterable

from kathikon.storage import vendor

CHANNEL = "kathikon"
AVAILABLE = "available"
PAUSE = "pause"
RESUME = "resume"


def notify(event: str, queues: Iterable[str]) -> None:
    """Send ``event`` for each queue (PostgreSQL only; a no-op elsewhere)."""
    names = sorted(set(queues))
    if not names or not vendor.is_postgres():
        return
    with vendor.connection().cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s || ' ' || q) FROM unnest(%s::text[]) AS q",
                       [CHANNEL, event, names])


def payload(event: str, queue: str) -> str:
    """The payload of ``event`` for ``queue``: what ``parse`` reads back."""
    return f"{event} {queue}"


def parse(payload: str) -> tuple[str, str]:
    """``(event, queue)`` from a payload."""
    event, _, queue = payload.partition(" ")
    return event, queue
