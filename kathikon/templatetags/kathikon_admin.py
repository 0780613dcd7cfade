"""Internal: ``{% kathikon_overview %}``, the queue summary and chart of the admin's app page,
and ``{% live_every request %}``, how often kathikon/live.js updates it in place."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse

from kathikon import report
from kathikon.admin.chart import throughput_svg

register = template.Library()

TIMING_SAMPLE = 20_000  # the newest completions of the hour read for the percentiles
LIVE_EVERY = 5  # seconds between the overview's updates in place (kathikon/live.js)
LIVE_CHOICES = (0, 5, 30)  # paused, the default, and a lighter one


@register.simple_tag
def live_every(request: Any) -> int:
    """Seconds between live updates, from ``?refresh=`` (0 pauses); anything else: 5."""
    try:
        every = int(request.GET.get("refresh", LIVE_EVERY))
    except (AttributeError, TypeError, ValueError):
        return LIVE_EVERY
    return every if every in LIVE_CHOICES else LIVE_EVERY


@register.inclusion_tag("admin/kathikon/overview.html", takes_context=True)
def kathikon_overview(context: dict[str, Any]) -> dict[str, Any]:
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not (user.has_perm("kathikon.view_job")
                            or user.has_perm("kathikon.view_queue")):
        return {"allowed": False}
    from kathikon.admin.common import COUNT_CAP, FAILURE_SAMPLE, age

    queues = [{**summary.as_dict(), "executing": summary.counts["claimed"]
               + summary.counts["running"], "oldest": age(summary.oldest_available_age),
               "waiting": summary.counts["available"] + summary.counts["scheduled"]
               + summary.counts["retryable"],
               "shown": {state: summary.count_text(state) for state in summary.counts}}
              for summary in report.queue_summary(count_cap=COUNT_CAP)]
    names = [queue["name"] for queue in queues]
    chart_queue = request.GET.get("chart") if request is not None else None
    if chart_queue not in names:
        chart_queue = None  # all queues (also for a name no queue has)
    return {
        "allowed": True,
        "queues": queues,
        "chart": throughput_svg(report.throughput(minutes=60, queue=chart_queue)),
        "chart_queue": chart_queue,
        "chart_choices": names,
        "timings": [{"queue": t.queue, "jobs": t.jobs,
                     "wait": {k: seconds(v) for k, v in t.wait.items()},
                     "run": {k: seconds(v) for k, v in t.run.items()}}
                    for t in report.timing_summary(minutes=60, sample=TIMING_SAMPLE)],
        "timing_sample": f"{TIMING_SAMPLE:,}",
        "failures": report.failure_summary(limit=10, scan_cap=FAILURE_SAMPLE),
        "unknown_workers": report.unknown_workers(),
        "failure_sample": f"{FAILURE_SAMPLE:,}",
        "count_cap": f"{COUNT_CAP:,}",
        "jobs_url": reverse("admin:kathikon_job_changelist"),
        "queues_url": reverse("admin:kathikon_queue_changelist"),
    }


def seconds(value: float) -> str:
    """A duration for a table cell: ``850 ms``, ``4.2 s``, ``3.5 min``."""
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"
