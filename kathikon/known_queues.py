"""Internal: which queue names are known, so a typo'd queue is said out loud.

A queue is *known* when it is in ``KATHIKON["QUEUES"]``, declared by ``TASKS``
for Kathikon's backend, has a ``Queue`` row, or is run by a live node. A job
inserted anywhere else waits forever, so ``insert`` logs the warning
``kathikon.W001`` gives statically, once per queue name per process; and
``kathikon_ops`` refuses to create such a queue by accident.

The insert path stays free of queries: the settings' names are checked in
memory; a name outside them is looked up in the database (two queries), and
the answer is kept :data:`TTL` seconds. A name missing from that answer is
looked up once more (it may be a queue started a moment ago), then warned
about and never looked up again.
"""

from __future__ import annotations

import difflib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from django.core.signals import setting_changed
from django.db import DatabaseError

from kathikon import conf, storage

logger = logging.getLogger("kathikon")

#: Seconds a database answer (queue rows, live nodes' queues) is trusted by ``insert``.
TTL = 30.0
#: Queue names remembered as warned about; past it, a program that invents names stays quiet.
MAX_WARNED = 10_000


class KnownQueues:
    """The process's memory of known queue names; :data:`known` is the one ``insert`` uses.

    Thread-safe: the cached answers are immutable values swapped in one
    assignment; the set of names already warned about is guarded by a lock.
    """

    def __init__(self, *, ttl: float = TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._configured: frozenset[str] | None = None  # built on first use from the settings
        # (names, trusted until); None as names: the lookup failed, so nothing is warned.
        self._stored: tuple[frozenset[str] | None, float] = (frozenset(), -math.inf)
        self._warned: set[str] = set()

    def notice(self, name: str) -> None:
        """Log ``kathikon.W001`` the first time a job goes into a queue nothing knows."""
        configured = self._configured
        if configured is None:
            configured = self._configured = frozenset(conf.served_queue_names())
        if name in configured or name in self._warned or len(self._warned) >= MAX_WARNED:
            return
        stored = self._database_names(name)
        if stored is None or name in stored:
            return
        with self._lock:
            if name in self._warned:
                return
            self._warned.add(name)
        logger.warning("kathikon.W001: %s", insert_warning(name, configured | stored))

    def settings_changed(self) -> None:
        """Forget the settings' names and the database's answer (``override_settings``)."""
        self._configured = None
        self._stored = (frozenset(), -math.inf)

    def forget(self) -> None:
        """Forget everything, warnings given included (tests)."""
        with self._lock:
            self.settings_changed()
            self._warned.clear()

    def _database_names(self, name: str) -> frozenset[str] | None:
        """The answer read within the TTL if it knows ``name``; else a fresh one (a queue
        started a moment ago is no typo). Once per unknown name: then it is warned."""
        names, until = self._stored
        now = self._clock()
        if now < until and (names is None or name in names):
            return names
        names = _look_up()
        self._stored = (names, now + self._ttl)
        return names


def _look_up() -> frozenset[str] | None:
    """The rows' and live nodes' queues; None if the database could not say (the lookup
    runs in a savepoint inside the caller's transaction, which stays usable)."""
    try:
        return frozenset(storage.queues.known_queue_names_safely(conf.rescue_after()))
    except DatabaseError:
        logger.warning("kathikon: looking up the known queues failed; inserts into queues "
                       "outside the settings are not checked for %g s", TTL, exc_info=True)
        return None


#: The instance ``kathikon.insert`` and ``insert_many`` report to (one per process).
known = KnownQueues()


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in ("KATHIKON", "TASKS"):
        known.settings_changed()


setting_changed.connect(_on_setting_changed, dispatch_uid="kathikon.known_queues.reset")


def queue_sources() -> tuple[tuple[str, Iterable[str]], ...]:
    """Where a known queue comes from, read now (two queries): ``settings``
    (``KATHIKON["QUEUES"]``), ``TASKS``, ``row`` (a ``Queue`` row) and ``worker`` (a
    live node runs it, ``--queues`` say). The one list of them: ``dashboard.all_queues``
    adds the queues that hold jobs."""
    return (("settings", conf.queue_names()), ("TASKS", conf.tasks_queue_names()),
            ("row", storage.queues.queue_rows()),
            ("worker", storage.reports.live_node_queues(conf.rescue_after())))


def known_queue_names() -> set[str]:
    """Every known queue, read now (:func:`queue_sources`)."""
    return {name for _, names in queue_sources() for name in names}


def unknown(name: object) -> str | None:
    """Why ``name`` is no known queue, or None if it is one; ``InvalidQueue`` if no name."""
    storage.queues.validate_name(name)
    names = known_queue_names()
    return None if name in names else unknown_queue(str(name), names)


def close_match(name: str, names: Iterable[str]) -> str | None:
    """The known name ``name`` most likely misspells, if any is close."""
    found = difflib.get_close_matches(name, sorted(names), n=1)
    return found[0] if found else None


def unknown_queue(name: str, names: Iterable[str]) -> str:
    """Why ``name`` is refused where only known queues are taken; the likely fix first."""
    names = sorted(names)
    return (f"unknown queue {name!r}{_guess(name, names)}: no setting, Queue row or live worker "
            f"knows it; known queues: {', '.join(names) or '(none)'}")


def insert_warning(name: str, names: Iterable[str]) -> str:
    """The log line of an insert into an unknown queue: W001's words, for one queue."""
    return (f"a job was inserted into the queue {name!r}{_guess(name, names)}, which no "
            "setting, Queue row or live worker knows: no kathikon_worker runs its jobs by "
            f"default, so they wait forever. Add {name!r} to KATHIKON['QUEUES'], run a worker "
            f"with --queues {name}, or call kathikon.start_queue({name!r}) once. "
            "(Said once per queue per process.)")


def _guess(name: str, names: Iterable[str]) -> str:
    guess = close_match(name, names)
    return f" (did you mean {guess!r}?)" if guess else ""
