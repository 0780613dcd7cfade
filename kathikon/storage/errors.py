"""Internal: which database errors heal by themselves (retry) and which never will.

The acker retries a write only when trying again can succeed: the connection
was lost or refused, or the transaction lost a race (serialization failure,
deadlock, a lock wait that timed out, SQLite's "database is locked"). Anything
else — the database refusing a value, a bug — is permanent for the rows
involved: retrying would only wedge every later write behind it.
"""

from __future__ import annotations

from django.db import utils as db

#: PostgreSQL SQLSTATEs that heal (the first three: the transaction lost a race and was
#: rolled back): serialization failure, deadlock, lock not available,
#: too many connections, the server shutting down or not accepting connections yet.
_PG_LOST_RACE = frozenset({"40001", "40P01", "55P03"})
_PG_TRANSIENT = _PG_LOST_RACE | {"53300", "57P01", "57P02", "57P03"}
#: MariaDB/MySQL error codes that heal: lock wait timeout, deadlock, too many connections,
#: server shutdown, connection killed, and the client's lost/refused connection errors.
_MYSQL_LOST_RACE = frozenset({1205, 1213})
_MYSQL_TRANSIENT = _MYSQL_LOST_RACE | {1040, 1053, 1927, 4031, 2002, 2003, 2006, 2013, 2055}
#: SQLite primary result codes: SQLITE_BUSY, SQLITE_LOCKED.
_SQLITE_TRANSIENT = frozenset({5, 6})


def is_transient(exc: BaseException) -> bool:
    """Whether a failed database write may succeed if simply tried again."""
    if isinstance(exc, db.InterfaceError):
        return True  # the connection is closed or unusable: a new one heals it
    if not isinstance(exc, db.DatabaseError):
        return False  # a value the driver refused before sending it, or a bug
    cause = _driver_error(exc)
    sqlstate = getattr(cause, "sqlstate", None)
    if sqlstate is not None:  # psycopg
        return sqlstate in _PG_TRANSIENT or sqlstate.startswith("08")
    code = getattr(cause, "sqlite_errorcode", None)
    if code is not None:  # sqlite3 (Python >= 3.11)
        return code & 0xFF in _SQLITE_TRANSIENT
    if type(cause).__module__.startswith("psycopg"):
        # no SQLSTATE: the server never answered (connection lost, closed or refused)
        return isinstance(exc, db.OperationalError)
    code = _mysql_code(cause)
    if code is not None:
        return code in _MYSQL_TRANSIENT
    message = str(exc).lower()
    return isinstance(exc, db.OperationalError) and (
        "database is locked" in message or "database table is locked" in message)


def lost_a_race(exc: BaseException) -> bool:
    """Whether the transaction was rolled back for losing a race with another one (deadlock,
    serialization failure, lock wait timeout): running it again whole can succeed."""
    if not isinstance(exc, db.OperationalError):
        return False
    cause = _driver_error(exc)
    sqlstate = getattr(cause, "sqlstate", None)
    if sqlstate is not None:
        return sqlstate in _PG_LOST_RACE
    return _mysql_code(cause) in _MYSQL_LOST_RACE


def _driver_error(exc: BaseException) -> BaseException:
    """The driver's exception behind Django's wrapper (or ``exc`` itself)."""
    return exc.__cause__ if exc.__cause__ is not None else exc


def _mysql_code(cause: BaseException) -> int | None:
    """mysqlclient's error code: its exceptions carry ``(code, message)``."""
    args = getattr(cause, "args", ())
    return args[0] if args and isinstance(args[0], int) else None
