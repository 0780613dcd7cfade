"""Internal: the overview's throughput chart, drawn on the server as an SVG.

No JavaScript, no CDN: a bar per minute, completed jobs (green) stacked under
failed ones (red), with a ``<title>`` tooltip per bar.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from kathikon.report import ThroughputPoint

WIDTH, HEIGHT = 760, 220
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 16, 28
COMPLETED, FAILED = "#3b8f4e", "#c0392b"


def throughput_svg(points: Sequence[ThroughputPoint]) -> SafeString:
    """An SVG bar chart of ``points`` (one per minute, oldest first)."""
    completed = sum(point.completed for point in points)
    failed = sum(point.failed for point in points)
    peak = max([point.completed + point.failed for point in points] + [1])
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / max(len(points), 1)
    parts = [format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" class="kathikon-chart" role="img" '
        'viewBox="0 0 {} {}" width="100%" data-completed="{}" data-failed="{}">'
        "<title>Completed and failed jobs per minute</title>",
        WIDTH, HEIGHT, completed, failed)]
    for fraction in (0, 0.5, 1):
        y = TOP + plot_h * (1 - fraction)
        parts.append(format_html(
            '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#ccc" stroke-width="1"/>'
            '<text x="{}" y="{}" font-size="11" text-anchor="end" fill="#666">{}</text>',
            LEFT, WIDTH - RIGHT, _n(y), _n(y), LEFT - 6, _n(y + 4), f"{peak * fraction:g}"))
    for index, point in enumerate(points):
        x = LEFT + index * step
        done_h = plot_h * point.completed / peak
        fail_h = plot_h * point.failed / peak
        label = f"{point.minute:%H:%M} UTC: {point.completed} completed, {point.failed} failed"
        parts.append(format_html('<g><title>{}</title>', label))
        if point.completed:
            parts.append(format_html(
                '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>',
                _n(x + 1), _n(TOP + plot_h - done_h), _n(max(step - 2, 1)), _n(done_h), COMPLETED))
        if point.failed:
            parts.append(format_html(
                '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>',
                _n(x + 1), _n(TOP + plot_h - done_h - fail_h), _n(max(step - 2, 1)), _n(fail_h),
                FAILED))
        parts.append(mark_safe("</g>"))
        if index % 10 == 0 or index == len(points) - 1:
            parts.append(format_html(
                '<text x="{}" y="{}" font-size="11" text-anchor="middle" fill="#666">{}'
                "</text>", _n(x + step / 2), HEIGHT - 8, f"{point.minute:%H:%M}"))
    parts.append(format_html(
        '<text x="{}" y="{}" font-size="11" fill="{}">■ completed {}</text>'
        '<text x="{}" y="{}" font-size="11" fill="{}">■ failed {}</text></svg>',
        WIDTH - 230, 12, COMPLETED, completed, WIDTH - 110, 12, FAILED, failed))
    return mark_safe("".join(parts))  # every part went through format_html


def _n(value: float) -> str:
    return f"{value:.1f}"
