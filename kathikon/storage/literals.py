"""Internal: PostgreSQL array literals (``'{…}'``) for parameters of ids and integers.

psycopg dumps a Python list element by element in Python; a literal is one string,
joined in C, which PostgreSQL parses on the server. Uuids go as their 32 hex digits
(``UUID.hex``: a sixth of ``str(uuid)``'s time) and need no quoting, nor do integers;
text that may need quoting is not for this module.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable


def array(items: Iterable[str]) -> str:
    """The literal of strings that need no quoting (hex ids, numbers)."""
    return "{" + ",".join(items) + "}"


def uuid_array(values: Iterable[uuid.UUID]) -> str:
    """The literal of ``values`` as 32 hex digits each."""
    return array([value.hex for value in values])


def int_array(values: Iterable[int]) -> str:
    return array(map(str, values))


__all__ = ["array", "int_array", "uuid_array"]
