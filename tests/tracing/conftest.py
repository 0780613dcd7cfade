"""Tracing tests: the real OpenTelemetry SDK, its in-memory exporter, and the runtime's
whole-process fixtures."""

from __future__ import annotations

from typing import Any

import pytest

from tests.runtime.conftest import worker_processes  # noqa: F401

sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="needs opentelemetry-sdk")


@pytest.fixture(scope="session")
def _provider() -> Any:
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # once per process: the API refuses a second one
    return exporter


@pytest.fixture
def spans(_provider: Any, settings: Any) -> Any:
    """Tracing on, and the spans finished during the test (``spans.get_finished_spans()``)."""
    settings.KATHIKON = {**getattr(settings, "KATHIKON", {}), "TRACING": True}
    _provider.clear()
    return _provider
