"""A trace drawn as a waterfall (HTML): what docs/img/trace.png shows, rendered by the tests
from the spans the real OpenTelemetry SDK recorded."""

from __future__ import annotations

from html import escape
from typing import Any


def html(spans: list[Any]) -> str:
    ordered = _depth_first(spans)
    start = min(span.start_time for span in spans)
    end = max(span.end_time for span in spans)
    total = max(1, end - start)
    rows = []
    for depth, span in ordered:
        left = 100 * (span.start_time - start) / total
        width = max(0.4, 100 * (span.end_time - span.start_time) / total)
        failed = span.status.status_code.name == "ERROR"
        attributes = {key: span.attributes[key] for key in (
            "messaging.destination.name", "messaging.operation.type", "kathikon.job.attempt",
            "kathikon.job.outcome") if key in (span.attributes or {})}
        labels = {"messaging.destination.name": "queue", "messaging.operation.type": "operation",
                  "kathikon.job.attempt": "attempt", "kathikon.job.outcome": "outcome"}
        note = " ".join(f"{labels[key]}={value}" for key, value in attributes.items())
        links = " ↩ linked to attempt before" if span.links else ""
        rows.append(
            f'<div class="row"><div class="name" style="padding-left:{depth * 18}px">'
            f'{escape(span.name)} <small>{escape(span.kind.name.lower())}</small></div>'
            f'<div class="lane"><div class="bar{" error" if failed else ""}" '
            f'style="left:{left:.2f}%;width:{width:.2f}%"></div></div>'
            f'<div class="note">{escape(note + links)}'
            f'{" · " + escape(span.status.description or "") if failed else ""}</div></div>')
    trace_id = f"{spans[0].context.trace_id:032x}"
    return f"""<!doctype html><meta charset="utf-8"><style>
body {{ font: 13px system-ui, sans-serif; margin: 16px; color: #1f2328; }}
h1 {{ font-size: 15px; }} .row {{ display: flex; align-items: center; height: 28px;
border-bottom: 1px solid #eee; }}
.name {{ width: 260px; box-sizing: border-box; flex: none; }}
.lane {{ position: relative; flex: 1; height: 14px; background: #f6f8fa; }}
.bar {{ position: absolute; top: 0; bottom: 0; background: #2da44e; border-radius: 3px; }}
.bar.error {{ background: #cf222e; }}
.note {{ width: 430px; flex: none; padding-left: 12px; color: #57606a; }}
small {{ color: #8c959f; }}
</style><h1>trace {trace_id}: {len(spans)} spans, {total / 1e6:.1f} ms</h1>{''.join(rows)}"""


def _depth_first(spans: list[Any]) -> list[tuple[int, Any]]:
    children: dict[int | None, list[Any]] = {}
    ids = {span.context.span_id for span in spans}
    for span in spans:
        parent = span.parent.span_id if span.parent and span.parent.span_id in ids else None
        children.setdefault(parent, []).append(span)
    out: list[tuple[int, Any]] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: s.start_time):
            out.append((depth, span))
            walk(span.context.span_id, depth + 1)

    walk(None, 0)
    return out
