"""Internal: the connection hygiene around one job, as Django's request cycle does it.

Executor threads run user code that may break or leave state on its
connections; these helpers put every connection of the current thread back
into the state the next job expects. Connections are thread-local, so they
only ever touch the calling thread's.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import connections

logger = logging.getLogger("kathikon.runtime")


def close_unusable() -> None:
    """Close this thread's connections that are broken or past ``CONN_MAX_AGE``."""
    for connection in connections.all(initialized_only=True):
        connection.close_if_unusable_or_obsolete()


def database_answers(alias: str) -> bool:
    """Whether the database behind ``alias`` answers a query now, from this thread."""
    connection = connections[alias]
    try:
        connection.ensure_connection()
        if connection.is_usable():
            return True
    except Exception:
        logger.debug("the database %r does not answer", alias, exc_info=True)
    try:
        if not connection.in_atomic_block:
            connection.close()
    except Exception:
        logger.debug("closing the %r connection failed", alias, exc_info=True)
    return False


def atomic_depths() -> dict[str, int]:
    """How many ``atomic`` blocks are open on each initialised connection of this thread."""
    return {connection.alias: len(connection.atomic_blocks)
            for connection in connections.all(initialized_only=True)
            if connection.atomic_blocks}


def roll_back_left_open(before: dict[str, int] | None, error: BaseException, *,
                        close_unusable: bool = False) -> list[str]:
    """Roll back the ``atomic`` blocks opened since ``before`` and never exited.

    ``before`` is :func:`atomic_depths` taken before the job (``None``: none were
    open, as on an executor thread between jobs). Each block is exited as if
    ``error`` had been raised in it, so Django rolls back to its savepoint (or
    the whole transaction) and restores autocommit; a block that cannot be
    exited closes its connection instead. With ``close_unusable`` the same pass
    closes broken or obsolete connections, as the end of a request does.
    Returns the aliases that had blocks left open.
    """
    found = []
    for connection in connections.all(initialized_only=True):
        blocks: list[Any] = connection.atomic_blocks
        keep = before.get(connection.alias, 0) if before else 0
        if len(blocks) > keep:
            found.append(connection.alias)
            _exit_blocks(connection, blocks, keep, error)
        if close_unusable:
            connection.close_if_unusable_or_obsolete()
    return found


def _exit_blocks(connection: Any, blocks: list[Any], keep: int, error: BaseException) -> None:
    while len(blocks) > keep:
        block = blocks[-1]
        try:
            block.__exit__(type(error), error, None)
        except Exception:
            logger.warning("kathikon: rolling back a transaction left open on %r failed; "
                           "closing the connection", connection.alias, exc_info=True)
            _discard(connection)
            return
        if blocks and blocks[-1] is block:  # __exit__ did not pop it: never loop forever
            _discard(connection)
            return


def _discard(connection: Any) -> None:
    """Forget every open block and close the connection: the server rolls back."""
    connection.atomic_blocks.clear()
    connection.savepoint_ids.clear()
    connection.in_atomic_block = False
    connection.needs_rollback = False
    connection.closed_in_transaction = False
    connection.commit_on_exit = True
    try:
        connection.close()
    except Exception:
        logger.debug("closing connection %r failed", connection.alias, exc_info=True)
    connection.connection = None
