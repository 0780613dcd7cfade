"""The job whose ``perform`` runs in this context: a ``ContextVar``, never module state.

The executor sets it around ``perform``; ``Batch.open`` reads it to learn that
its parent is the job performing right here, and records the batch so the
parent's outcome says "hold me while this batch is open". A context is one
thread or one asyncio task (copied into ``sync_to_async`` helpers), so jobs
running side by side never see each other's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kathikon.models import Job


@dataclass(slots=True)
class Performing:
    """A job running its ``perform`` and the batches it opened (and did not close) meanwhile."""

    job: Job
    open_batches: set[uuid.UUID] = field(default_factory=set)


_current: ContextVar[Performing | None] = ContextVar("kathikon_performing", default=None)


def current() -> Performing | None:
    """The job performing in this context, if any."""
    return _current.get()


def current_for(job_id: uuid.UUID | None) -> Performing | None:
    """The job performing in this context if it is ``job_id``."""
    found = _current.get()
    return found if found is not None and found.job.id == job_id else None


@contextmanager
def performing(job: Job) -> Iterator[Performing]:
    """Mark ``job`` as the one performing in this context for the ``with`` block."""
    token = _current.set(Performing(job))
    try:
        yield _current.get()  # type: ignore[misc]
    finally:
        _current.reset(token)
