"""Internal: the spans themselves, on the OpenTelemetry API (imported only when tracing is on).

Names and attributes follow the messaging semantic conventions: ``messaging.system``
is ``kathikon``, the destination is the queue, the producer span's operation is
``send`` (named ``publish``) and the consumer's ``process``; the message id is the
job id. Kathikon's own attributes are ``kathikon.job.attempt``, ``kathikon.job.worker``
and ``kathikon.job.outcome``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import context, propagate, trace
from opentelemetry.semconv._incubating.attributes import messaging_attributes as messaging
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

SYSTEM = "kathikon"
_FAILED = frozenset({"failed", "discarded"})


# The API's proxy until an SDK is set up, then the SDK's tracer: asking for one per span
# cost 35 us (the SDK builds a Tracer each time).
_TRACER = trace.get_tracer("kathikon")


def _tracer() -> trace.Tracer:
    return _TRACER


def publish(queue: str, worker: str) -> dict[str, str]:
    """Open and close the producer span of an insert; returns its context as ``meta`` keys."""
    with _tracer().start_as_current_span(f"send {queue}", kind=SpanKind.PRODUCER, attributes={
            messaging.MESSAGING_SYSTEM: SYSTEM,
            messaging.MESSAGING_DESTINATION_NAME: queue,
            messaging.MESSAGING_OPERATION_TYPE: "send",
            messaging.MESSAGING_OPERATION_NAME: "publish",
            "kathikon.job.worker": worker}):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
    return carrier


@contextmanager
def process(job: Any) -> Iterator[Callable[[Any], None]]:
    """The consumer span of one attempt, current while it runs: a child of the insert's
    span (a root span when the job carries no context), linked to the previous attempt."""
    meta = job.meta if isinstance(job.meta, dict) else {}
    parent = propagate.extract({key: str(meta[key]) for key in ("traceparent", "tracestate")
                                if key in meta}, context=context.Context())
    links = []
    previous = _previous_attempt(job)
    if previous is not None:
        links.append(Link(previous, {"kathikon.link": "previous attempt"}))
    attributes = {
        messaging.MESSAGING_SYSTEM: SYSTEM,
        messaging.MESSAGING_DESTINATION_NAME: job.queue,
        messaging.MESSAGING_OPERATION_TYPE: "process",
        messaging.MESSAGING_OPERATION_NAME: "process",
        messaging.MESSAGING_MESSAGE_ID: job.id.hex,
        "kathikon.job.attempt": int(job.attempts),
        "kathikon.job.worker": job.shown_worker,
    }
    with _tracer().start_as_current_span(f"process {job.queue}", context=parent,
                                         kind=SpanKind.CONSUMER, links=links,
                                         attributes=attributes,
                                         record_exception=False,
                                         set_status_on_exception=False) as span:
        job.trace_span = span  # where the pool's timeout finds it (ended_elsewhere)
        try:
            yield lambda execution: end_once(job, span, execution)
        finally:
            job.trace_span = None


def end_once(job: Any, span: Any, execution: Any) -> None:
    """Record the attempt's outcome once: the pool's timeout (on its own thread) comes
    first when ``perform`` overruns, and the thread's own outcome is then not the job's."""
    if getattr(job, "trace_span_ended", False):
        return
    job.trace_span_ended = True
    _end(span, execution)


def _end(span: Any, execution: Any) -> None:
    """Record how the attempt ended: its outcome, the error, a retry or a snooze."""
    span.set_attribute("kathikon.job.outcome", execution.kind)
    if execution.kind in _FAILED:
        if execution.exception is not None:
            span.record_exception(execution.exception)
        error = (execution.ack.error or {}) if execution.ack is not None else {}
        span.set_status(Status(StatusCode.ERROR, str(error.get("message", ""))[:500]))
        span.set_attribute("error.type", str(error.get("kind", "")) or "kathikon.Failed")
    if execution.ack is not None and execution.ack.state in ("retryable", "scheduled"):
        span.add_event("retry scheduled" if execution.kind in _FAILED else "snoozed",
                       {"kathikon.job.delay_seconds": float(execution.ack.delay),
                        "kathikon.job.state": execution.ack.state})


def _previous_attempt(job: Any) -> Any:
    """The span context of the attempt before this one, kept in its error entry."""
    errors = job.errors if isinstance(job.errors, list) else []
    if not errors or not isinstance(errors[-1], dict) or not errors[-1].get("span"):
        return None
    found = trace.get_current_span(propagate.extract(
        {"traceparent": str(errors[-1]["span"])}, context=context.Context()))
    span_context = found.get_span_context()
    return span_context if span_context.is_valid else None


def current_traceparent() -> str | None:
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get("traceparent")
