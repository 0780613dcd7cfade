"""Gauges read from the database at each scrape: what waits, not what one process did.

Two statements per scrape, whatever the number of worker processes: the count of
each (queue, state) on its index (on PostgreSQL a count past :data:`COUNT_CAP` is the
planner's estimate, as on the admin's overview) and each queue's oldest due job.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kathikon import conf
from kathikon.storage import reports, vendor

COUNT_CAP = 10_000


class DatabaseCollector(Collector):
    """``kathikon_jobs{queue,state}`` and ``kathikon_oldest_due_job_age_seconds{queue}``."""

    def collect(self) -> Iterator[Any]:
        jobs = GaugeMetricFamily("kathikon_jobs", "Jobs by queue and state (PostgreSQL: "
                                 f"counts past {COUNT_CAP:,} are estimates).",
                                 labels=["queue", "state"])
        databases = conf.databases()  # queues on several databases: each one's (scaling.md)
        for database in databases:
            with vendor.using(database):
                for row in reports.queue_state_counts(COUNT_CAP):
                    jobs.add_metric([row["queue"], row["state"]], row["count"])
        yield jobs
        age = GaugeMetricFamily("kathikon_oldest_due_job_age_seconds",
                                "Seconds since the oldest job that is due (available or "
                                "retryable) became due, per queue that has one.",
                                labels=["queue"])
        now = vendor.now()
        for database in databases:
            with vendor.using(database):
                activity = reports.queue_activity(now)
            for row in activity:
                if row["state"] is None and row["oldest_available_at"] is not None:
                    seconds = (now - row["oldest_available_at"]).total_seconds()
                    age.add_metric([row["queue"]], max(0.0, seconds))
        yield age
