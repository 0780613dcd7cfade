"""Prometheus metrics, out of the box (``pip install "kathikon[prometheus]"``).

Two sources, so that nothing is counted twice and the database is asked once per scrape:

- **Worker processes** count what they do, from Kathikon's signals
  (:mod:`kathikon.metrics.instruments`): attempts that ended by queue, worker and
  the state the job went to, run time and queue wait. ``kathikon_worker
  --metrics-port 9100`` serves them, one exporter per worker node (with
  ``--processes N`` the N nodes listen on 9100 … 9100+N-1).
- **The database** knows what waits: jobs by queue and state, and the age of each
  queue's oldest due job (:mod:`kathikon.metrics.database`). The Django view
  :func:`metrics_view`, mounted once in ``urls.py``, reads them at each scrape.

See docs/metrics.md.
"""

from __future__ import annotations

try:
    import prometheus_client  # noqa: F401
except ImportError as missing:  # pragma: no cover - depends on the installed extras
    raise ImportError("kathikon.metrics needs prometheus_client: "
                      "pip install 'kathikon[prometheus]'") from missing

from kathikon.metrics.exporter import serve
from kathikon.metrics.instruments import install
from kathikon.metrics.views import metrics_view

# kathikon.metrics.database.DatabaseCollector reads the job table: imported by the view when
# it first serves, so that urls.py can name the view before the app registry is ready.
__all__ = ["install", "metrics_view", "serve"]
