"""The Django view that Prometheus scrapes: the database's gauges, and this process's own
metrics (mount it once: every scrape asks the database)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``path("metrics", kathikon.metrics.metrics_view)``; protect it as you would any
    internal endpoint (it shows queue names and counts, nothing of the jobs' args)."""
    from kathikon.metrics.database import DatabaseCollector  # the models: not at import time

    database = CollectorRegistry(auto_describe=False)
    database.register(DatabaseCollector())
    body = generate_latest(database) + generate_latest(REGISTRY)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
