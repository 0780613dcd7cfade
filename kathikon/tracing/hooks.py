"""Internal: where inserts and the executor meet tracing; free when ``TRACING`` is off."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kathikon import conf

#: The ``meta`` keys that carry the trace context (W3C Trace Context).
TRACE_KEYS = ("traceparent", "tracestate")


def inject(meta: dict[str, Any], *, queue: str, worker: str) -> dict[str, Any]:
    """``meta`` with the context of a new producer span (``send <queue>``) when tracing is
    on; ``meta`` itself otherwise. A context the caller put in ``meta`` is kept."""
    if not conf.tracing() or "traceparent" in meta:
        return meta
    from kathikon.tracing import spans

    return {**meta, **spans.publish(queue, worker)}


@contextmanager
def traced(job: Any) -> Iterator[Any]:
    """Run one attempt of ``job`` inside its consumer span (a no-op when tracing is off).
    Yields a callable that records the attempt's outcome on the span: ``end(execution)``."""
    if not conf.tracing():
        yield _ignore
        return
    from kathikon.tracing import spans

    with spans.process(job) as end:
        yield end


def ended_elsewhere(job: Any, execution: Any) -> None:
    """The pool failed ``job``'s attempt on another thread (a timeout, a dead thread): say
    so on the attempt's span, which stays open until ``perform`` returns."""
    span = getattr(job, "trace_span", None)
    if span is None or not conf.tracing():
        return
    from kathikon.tracing import spans

    spans.end_once(job, span, execution)


def current_traceparent() -> str | None:
    """The ``traceparent`` of the current span (kept with a failed attempt's error, so the
    next attempt can link to it); None when tracing is off or no span is recording."""
    if not conf.tracing():
        return None
    from kathikon.tracing import spans

    return spans.current_traceparent()


def _ignore(execution: Any) -> None:
    return None
