"""Internal: the state lists the storage statements write into their SQL, made from
``kathikon.states`` in one place so that no statement spells a list of its own."""

from __future__ import annotations

from collections.abc import Iterable

from kathikon.states import CLAIMABLE_STATES, EXECUTING_STATES


def states_sql(states: Iterable[str]) -> str:
    """``states`` as the inside of an SQL ``IN (…)``: ``'available', 'retryable'``."""
    return ", ".join(f"'{state}'" for state in states)


def state_in_by_key(alias: str, states: Iterable[str]) -> str:
    """``alias.state IN (…)`` written ``(alias.state || '') IN (…)``: the same test, but one
    that no index serves, for a statement that finds its rows by primary key. Given the
    plain test, the planner may read the rows through a state index instead, and the
    statistics of the last ANALYZE often make that look cheap when it is not (kathikon.
    storage.acks, settle_postgres)."""
    return f"({alias}.state || '') IN ({states_sql(states)})"


CLAIMABLE_SQL = states_sql(CLAIMABLE_STATES)
EXECUTING_SQL = states_sql(EXECUTING_STATES)
