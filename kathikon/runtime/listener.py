"""Internal: PostgreSQL ``LISTEN`` — wakes the right dispatcher the moment jobs arrive.

One dedicated connection per worker process (alias ``LISTEN_DATABASE``, so
PgBouncer users can point it at a direct, session-mode connection) listens on
the ``kathikon`` channel. Payloads are ``"<event> <queue>"``: ``available``
and ``resume`` wake that queue's dispatcher; ``pause`` needs nothing (the
claim itself refuses a paused queue). After a lost connection the listener
backs off, reconnects and wakes every dispatcher, since notifications sent
meanwhile were missed. Polling remains the fallback throughout.
"""

from __future__ import annotations

import logging
import select
import threading
from collections.abc import Callable
from typing import Any

from django.db import connections

from kathikon.backoff import failure_delay
from kathikon.runtime.threads import start_thread
from kathikon.storage import notify

logger = logging.getLogger("kathikon.runtime")


class Listener:
    """Calls ``on_event(event, queue)`` for each notification; ``on_connect()`` after each
    (re)connection."""

    def __init__(self, alias: str, on_event: Callable[[str, str], None],
                 on_connect: Callable[[], None], *, max_backoff: float = 10.0) -> None:
        self.alias = alias
        self.on_event = on_event
        self.on_connect = on_connect
        self.max_backoff = max_backoff
        self.connected = threading.Event()
        self.received = 0
        self._stopping = threading.Event()
        self._raw: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> Listener:
        self._thread = start_thread(self._loop, name="kathikon-listener")
        return self

    def stop(self) -> None:
        self._stopping.set()

    def join(self, timeout: float | None = None) -> bool:
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the listener thread -----------------------------------------------------------------

    def _loop(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                self._raw = self._connect()
                if failures:
                    logger.info("kathikon: LISTEN connection back after %d failure(s)", failures)
                failures = 0
                self.connected.set()
                self.on_connect()
                self._listen(self._raw)
            except Exception as exc:
                if self._stopping.is_set():
                    break
                failures += 1
                delay = failure_delay(failures, base=0.1, cap=self.max_backoff)
                logger.warning("kathikon: LISTEN connection lost (%s: %s); reconnecting in "
                               "%.1fs", type(exc).__name__, exc, delay)
                self._stopping.wait(delay)
            finally:
                self.connected.clear()
                self._close()

    def _connect(self) -> Any:
        # A private connection outside Django's per-thread handler: it must stay in session
        # mode, autocommit, and is never handed to a transaction.
        wrapper = connections.create_connection(self.alias)
        raw = wrapper.get_new_connection(wrapper.get_connection_params())
        raw.autocommit = True
        cursor = raw.cursor()
        cursor.execute(f"LISTEN {notify.CHANNEL}")
        cursor.close()
        return raw

    def _listen(self, raw: Any) -> None:
        if hasattr(raw, "notifies") and callable(raw.notifies):  # psycopg 3
            while not self._stopping.is_set():
                for item in raw.notifies(timeout=0.5):
                    self._handle(item.payload)
        else:  # psycopg2: poll the socket
            while not self._stopping.is_set():
                if select.select([raw], [], [], 0.5)[0]:
                    raw.poll()
                    while raw.notifies:
                        self._handle(raw.notifies.pop(0).payload)

    def _handle(self, payload: str) -> None:
        self.received += 1
        event, queue = notify.parse(payload)
        try:
            self.on_event(event, queue)
        except Exception:  # a bad payload must not take the listener down
            logger.exception("kathikon: handling notification %r failed", payload)

    def _close(self) -> None:
        raw, self._raw = self._raw, None
        if raw is not None:
            try:
                raw.close()
            except Exception:
                logger.debug("closing the LISTEN connection failed", exc_info=True)
