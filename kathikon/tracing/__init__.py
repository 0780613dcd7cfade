"""OpenTelemetry tracing from insert to perform (``pip install "kathikon[otel]"``).

Turn it on with one setting, ``KATHIKON["TRACING"] = True``, in every process (web
and workers) that uses the settings; the spans go wherever your OpenTelemetry SDK
sends them. An insert opens a producer span ``send <queue>`` and writes its W3C trace
context into the job's ``meta``; each attempt runs ``perform`` inside a consumer span
``process <queue>``, a child of that producer span (so the request that enqueued the
job and the job's attempts are one trace), linked to the attempt before it. Errors,
retries, snoozes and timeouts are recorded on the span. See docs/tracing.md.

Nothing here imports OpenTelemetry until tracing is on: :mod:`kathikon.tracing.hooks`
is what the insert and the executor call, and with ``TRACING`` off it returns at once.
"""

from __future__ import annotations

from kathikon.tracing.hooks import TRACE_KEYS, inject, traced

__all__ = ["TRACE_KEYS", "inject", "traced"]
