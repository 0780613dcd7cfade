"""A span exporter that appends one JSON line per finished span to a file: how a real
worker process (testproject/settings.py, ``KATHIKON_TEST_TRACE_FILE``) shows its spans
to the test that started it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


class FileExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        with open(self.path, "a") as out:
            for span in spans:
                out.write(json.dumps({
                    "name": span.name, "kind": span.kind.name,
                    "trace_id": f"{span.context.trace_id:032x}",
                    "span_id": f"{span.context.span_id:016x}",
                    "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
                    "links": [f"{link.context.span_id:016x}" for link in span.links],
                    "status": span.status.status_code.name,
                    "attributes": dict(span.attributes or {}),
                    "events": [event.name for event in span.events],
                }) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def install(path: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(path)))
    trace.set_tracer_provider(provider)


def read(path: Any) -> list[dict[str, Any]]:
    from pathlib import Path

    file = Path(path)
    return [json.loads(line) for line in file.read_text().splitlines()] if file.exists() else []
