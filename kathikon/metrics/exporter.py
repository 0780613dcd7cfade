"""``kathikon_worker --metrics-port``: one exporter per worker node."""

from __future__ import annotations

import logging

from prometheus_client import start_http_server

from kathikon.metrics.instruments import install

logger = logging.getLogger("kathikon.runtime")


def serve(port: int, address: str = "") -> None:
    """Count this process's jobs and serve the counts on ``address:port`` (all interfaces
    by default) from a daemon thread; ``OSError`` when the port is taken."""
    install()
    start_http_server(port, addr=address or "0.0.0.0")
    logger.info("kathikon: Prometheus metrics of this process on port %d (/metrics)", port)
