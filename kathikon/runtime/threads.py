"""Internal: the worker's threads, each started in a copy of its creator's context.

A worker process serves one database alias (``kathikon_worker --database``, or one
child per alias): the alias is a context variable (``storage.vendor.using``) set before
any thread starts, and a plain ``threading.Thread`` would start in an empty context.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any


def start_thread(target: Callable[..., Any], *, name: str) -> threading.Thread:
    """A started daemon thread running ``target()`` in a copy of this thread's context."""
    thread = new_thread(target, name=name)
    thread.start()
    return thread


def new_thread(target: Callable[..., Any], *, name: str) -> threading.Thread:
    """The same, not started yet."""
    context = contextvars.copy_context()
    return threading.Thread(target=context.run, args=(target,), name=name, daemon=True)
