"""Internal: ``{% kathikon_overview %}``, the queue summary and chart of the admin's app page,
and ``{% live_every request %}``, how often kathikon/live.js updates it in place."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse

from kathikon import report
from kathikon.admin.chart import throughput_svg

register = template.Library()

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
    return {
        "allowed": True,
        "queues": queues,
        "chart": throughput_svg(report.throughput(minutes=60)),
        "failures": report.failure_summary(limit=10, scan_cap=FAILURE_SAMPLE),
        "unknown_workers": report.unknown_workers(),
        "failure_sample": f"{FAILURE_SAMPLE:,}",
        "count_cap": f"{COUNT_CAP:,}",
        "jobs_url": reverse("admin:kathikon_job_changelist"),
        "queues_url": reverse("admin:kathikon_queue_changelist"),
    }
