"""A TCP proxy to a test database server, for tests that need a network between the two."""

from __future__ import annotations

import contextlib
import socket
import threading


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
            threading.Thread(target=self.pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self.relay_server, args=(upstream, client),
                             daemon=True).start()

    def relay_server(self, upstream: socket.socket, client: socket.socket) -> None:
        """What the server sends, to the client (a subclass may rewrite it)."""
        self.pump(upstream, client)

    @staticmethod
    def pump(source: socket.socket, target: socket.socket) -> None:
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
