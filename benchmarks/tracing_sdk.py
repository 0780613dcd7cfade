"""The OpenTelemetry SDK as a traced deployment runs it, with an exporter that drops the spans:
what ``KATHIKON["TRACING"]`` costs a worker, not what a collector's network costs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def available() -> bool:
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return False
    return True


def install() -> None:
    """A TracerProvider with a BatchSpanProcessor (the SDK's default for production) whose
    exporter drops what it is given; once per process."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Dropping(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropping()))
    trace.set_tracer_provider(provider)
