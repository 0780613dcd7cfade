"""Ecosystem fixtures: the runtime's whole-process helpers, reused."""

from __future__ import annotations

from tests.runtime.conftest import wait_until, worker_processes

__all__ = ["wait_until", "worker_processes"]
