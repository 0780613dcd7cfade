"""A database outage under a running worker: every connection drops and reconnects are
refused for a while (what a PostgreSQL or MariaDB restart looks like to a client)."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time

import pytest
from django.db import connection

import kathikon
from kathikon.models import Job

from .conftest import wait_until
from .test_worker_process import FAST, RECORD, executions_per_job

pytestmark = pytest.mark.slow


class Proxy:
    """A TCP proxy to the database that can be taken down and brought back on the same port."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = 0
        self._server: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> Proxy:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(64)
        self.port = server.getsockname()[1]
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()
        return self

    def stop(self) -> None:
        """Close the listening socket and every proxied connection."""
        server, self._server = self._server, None
        with self._lock:
            sockets, self._sockets = self._sockets, []
        _close(*sockets, *([server] if server is not None else []))

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            _close(source, target)


def _close(*sockets: socket.socket) -> None:
    # shutdown() first: a bare close() while the other pump thread is blocked in recv() on the
    # same socket would leave the connection open (the blocked call keeps the file alive).
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.close()


def test_worker_rides_out_a_database_outage(worker_processes, vendor):
    if vendor == "sqlite":
        pytest.skip("SQLite has no server to lose")
    settings = connection.settings_dict
    proxy = Proxy((settings["HOST"] or "127.0.0.1", int(settings["PORT"]))).start()
    port_variable = "KATHIKON_PG_PORT" if vendor == "postgresql" else "KATHIKON_MYSQL_PORT"
    try:
        count = 200
        kathikon.insert_many([(RECORD, {"sleep": 0.01}) for _ in range(count)])
        worker = worker_processes.start("--queues", "default:5", "--node", "outage",
                                        settings=FAST, env={port_variable: str(proxy.port)})
        wait_until(lambda: len(executions_per_job()) >= 40, 20, message="progress")
        proxy.stop()  # the "restart": connections drop, reconnects are refused
        time.sleep(2)
        proxy.start()
        wait_until(lambda: Job.objects.filter(state="completed").count() == count, 40,
                   message="every job completed after the outage")
        assert len(executions_per_job()) == count
        worker.signal(signal.SIGTERM)
        assert worker.wait(15) == 0, worker.log()
        assert "retrying" in worker.log()
    finally:
        worker_processes.cleanup()
        proxy.stop()
    if vendor == "postgresql":  # let the proxied sessions end before the test DB is dropped
        wait_until(_alone, 10, message="the proxied sessions to end")


def _alone() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                       " AND pid <> pg_backend_pid()")
        return not cursor.fetchall()
