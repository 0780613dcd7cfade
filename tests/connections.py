"""Kathikon's database alias on a fresh connection of its own, for tests of connection state."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from django.db import connections


@contextlib.contextmanager
def fresh_connection(**changes: Any) -> Iterator[Any]:
    """This thread's ``default`` alias, for Kathikon and ``atomic()``, on a new connection
    with ``changes`` to its settings (``OPTIONS`` merged); closed and put back after."""
    default = connections["default"]
    settings = {**default.settings_dict, **changes}
    settings["OPTIONS"] = {**default.settings_dict["OPTIONS"], **changes.get("OPTIONS", {})}
    wrapper = type(default)(settings, alias="default")
    connections["default"] = wrapper
    try:
        yield wrapper
    finally:
        connections["default"] = default
        wrapper.close()


def another_session(*, dbname: str | None = None) -> Any:
    """A psycopg connection of its own (autocommit) to the test database, or to ``dbname``:
    what another process sees (a listener, a deploy's migration). PostgreSQL only."""
    import psycopg

    settings = connections["default"].settings_dict
    return psycopg.connect(host=settings["HOST"], port=settings["PORT"] or 5432,
                           user=settings["USER"], password=settings["PASSWORD"] or None,
                           dbname=dbname or settings["NAME"], autocommit=True)
