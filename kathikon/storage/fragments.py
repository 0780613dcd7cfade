"""Internal: the state lists the storage statements write into their SQL, made from
``kathikon.states`` in one place so that no statement spells a list of its own."""

from __future__ import annotations

from collections.abc import Iterable

from kathikon.states import CLAIMABLE_STATES, EXECUTING_STATES


def states_sql(states: Iterable[str]) -> str:
    """``states`` as the inside of an SQL ``IN (…)``: ``'available', 'retryable'``."""
    return ", ".join(f"'{state}'" for state in states)


CLAIMABLE_SQL = states_sql(CLAIMABLE_STATES)
EXECUTING_SQL = states_sql(EXECUTING_STATES)
