"""Queue and failure summaries for dashboards, the ops CLI and monitoring.

    from kathikon import report

    for queue in report.queue_summary():
        print(queue.name, queue.paused, queue.counts["available"], queue.oldest_available_age)
    for failure in report.failure_summary(window=3600):
        print(failure.worker, failure.kind, failure.count, failure.sample_message)

Each function runs a fixed number of aggregate queries (never one per queue
or per job), so they are safe to call on a table with millions of jobs.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from kathikon import conf
from kathikon.exceptions import read_kind
from kathikon.limits import in_force as limits_in_force
from kathikon.states import JobState
from kathikon.storage import limited, reports, vendor
from kathikon.storage import queues as queue_storage

__all__ = ["FailureSummary", "QueueSummary", "ThroughputPoint", "TimingSummary",
           "failure_summary", "queue_summary", "served_queues", "throughput", "timing_summary"]


@dataclass(frozen=True)
class QueueSummary:
    """One queue: pause state, effective concurrency, jobs per state and recent throughput.

    ``oldest_available_age`` is how long (seconds) the oldest due, unclaimed job
    has waited, ``None`` when nothing waits. ``failed_*`` count jobs that ended
    ``dead`` (retries that will run again are not failures yet). ``served`` is
    False when no live worker node (heartbeat within ``RESCUE_AFTER``) runs the
    queue: its jobs wait until one is started for it.
    """

    name: str
    paused: bool
    concurrency: int
    counts: dict[str, int] = field(default_factory=dict)
    oldest_available_age: float | None = None
    completed_last_minute: int = 0
    completed_last_hour: int = 0
    failed_last_minute: int = 0
    failed_last_hour: int = 0
    configured: bool = True
    served: bool = True
    estimated: tuple[str, ...] = ()
    #: Effective flow limits (global_limit, partition, rate_limit; None = unlimited), the
    #: executing jobs per partition key (partitioned queues) and the starts left in the
    #: current rate window (rate-limited queues).
    limits: dict[str, Any] = field(default_factory=dict)
    partitions: dict[str, int] = field(default_factory=dict)
    rate_left: int | None = None
    database: str = "default"  #: the alias that holds the queue's jobs (docs/scaling.md)

    def count_text(self, state: str) -> str:
        """A state's count for display: ``≈`` marks an estimate (see ``count_cap``)."""
        count = self.counts.get(state, 0)
        return f"≈{count:,}" if state in self.estimated else str(count)

    @property
    def status(self) -> str:
        """``paused``, ``unserved`` (by any live worker) or ``running``."""
        return "paused" if self.paused else "running" if self.served else "unserved"

    @property
    def limits_text(self) -> str:
        """The limits and their use in a few words ("" when unlimited)."""
        parts = []
        executing = self.counts.get("claimed", 0) + self.counts.get("running", 0)
        if self.limits.get("global_limit"):
            parts.append(f"global {executing}/{self.limits['global_limit']}")
        partition = self.limits.get("partition")
        if partition:
            full = sum(1 for n in self.partitions.values() if n >= partition["limit"])
            parts.append(f"{partition['limit']} per {partition['by']} "
                         f"({len(self.partitions)} busy, {full} full)")
        rate = self.limits.get("rate_limit")
        if rate and rate.get("by"):
            parts.append(f"rate {rate['allowed']}/{rate['period']:g}s per {rate['by']}")
        elif rate:
            parts.append(f"rate {self.rate_left} left of {rate['allowed']}/{rate['period']:g}s")
        return "; ".join(parts)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total": self.total, "status": self.status,
                "limits_text": self.limits_text}


@dataclass(frozen=True)
class FailureSummary:
    """Failures of one worker with one error kind (the exception's class path)."""

    worker: str
    kind: str
    count: int
    last_seen: dt.datetime | None
    sample_message: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ThroughputPoint:
    """Jobs that completed and that died in one minute (``minute`` is its start, UTC)."""

    minute: dt.datetime
    completed: int
    failed: int


def queue_summary(now: dt.datetime | None = None, *,
                  count_cap: int | None = None) -> list[QueueSummary]:
    """Every queue (configured, paused/overridden in the database, or holding jobs), by name.

    Four queries: the queue rows, the live nodes, one GROUP BY (queue, state) over
    the jobs (an index-only scan) and one for the oldest waiting and recently
    finished jobs. With ``count_cap`` (PostgreSQL; the admin uses 10,000) each
    (queue, state) is counted up to the cap and larger counts are the planner's
    estimates, listed in ``QueueSummary.estimated``: the cost then no longer grows
    with the table (plus one ``EXPLAIN`` per estimated count). A partitioned queue adds
    one GROUP BY of its executing jobs per partition key.
    """
    now = now or vendor.now()
    summaries: list[QueueSummary] = []
    for database in conf.databases():  # each database holds its own queues' jobs and rows
        with vendor.using(database):
            summaries += _summaries_here(database, now, count_cap)
    return sorted(summaries, key=lambda summary: summary.name)


def _summaries_here(database: str, now: dt.datetime,
                    count_cap: int | None) -> list[QueueSummary]:
    rows = queue_storage.queue_rows()
    served = served_queues()
    configured = {name: options for name, options in conf.queues().items()
                  if conf.queue_database(name) == database}
    counts: dict[str, dict[str, int]] = {}
    estimated: dict[str, list[str]] = {}
    for row in reports.queue_state_counts(count_cap):
        counts.setdefault(row["queue"], {})[row["state"]] = row["count"]
        if row["estimated"]:
            estimated.setdefault(row["queue"], []).append(row["state"])
    oldest: dict[str, dt.datetime] = {}
    finished: dict[tuple[str, str], dict[str, Any]] = {}
    for row in reports.queue_activity(now):
        if row["state"] is None:
            oldest[row["queue"]] = row["oldest_available_at"]
        else:
            finished[(row["queue"], row["state"])] = row
    names = sorted(set(configured) | set(rows) | set(counts))
    summaries = []
    for name in names:
        queue_row = rows.get(name)
        done = finished.get((name, JobState.COMPLETED), {})
        dead = finished.get((name, JobState.DEAD), {})
        override = queue_row.concurrency if queue_row is not None else None
        flow, _ = limits_in_force(configured.get(name, {}), getattr(queue_row, "limits", None))
        rate_used, _ = limited.rate_use(queue_row, flow, now)
        summaries.append(QueueSummary(
            name=name,
            paused=bool(queue_row and queue_row.paused),
            concurrency=int(override or configured.get(name, {}).get("concurrency", 10)),
            counts={state: counts.get(name, {}).get(state, 0) for state in JobState.values},
            oldest_available_age=(now - oldest[name]).total_seconds() if name in oldest else None,
            completed_last_minute=done.get("last_minute", 0),
            completed_last_hour=done.get("last_hour", 0),
            failed_last_minute=dead.get("last_minute", 0),
            failed_last_hour=dead.get("last_hour", 0),
            configured=name in configured,
            served=name in served,
            estimated=tuple(sorted(estimated.get(name, ()))),
            limits=flow.as_options() if flow else {},
            partitions=limited.partition_use(name, flow),
            rate_left=(flow.rate_allowed - rate_used) if flow.rate_allowed and not flow.rate_by
            else None,
            database=database,
        ))
    return summaries


def served_queues() -> set[str]:
    """Queues that at least one live worker node runs (from the nodes' registrations)."""
    return reports.live_node_queues(conf.rescue_after())


def unknown_workers() -> list[dict[str, str]]:
    """Worker classes that live worker processes hold jobs back for because they cannot
    import them (older code than the web's, most likely: restart or finish the deploy).
    ``since`` is when the node first held one back, ``YYYY-MM-DD HH:MM:SS`` UTC."""
    return [{"worker": path, "node": node, "since": since.replace("T", " ")[:19]}
            for path, node, since in reports.live_node_unknown_workers(conf.rescue_after())]


def failure_summary(*, window: float | dt.timedelta = 24 * 3600, limit: int = 100,
                    now: dt.datetime | None = None,
                    scan_cap: int | None = None) -> list[FailureSummary]:
    """Failures grouped by worker and error kind, most frequent first (one query).

    Looks at dead and retryable jobs that failed within ``window`` (seconds or a
    timedelta, default one day) and groups them by their *last* error. With
    ``scan_cap`` only the newest ``scan_cap`` dead and as many retryable jobs of
    the window are read (the admin's overview: its cost no longer grows with the
    number of failures).
    """
    since = window_start(window, now or vendor.now(), what="window")
    rows = reports.failure_rows(since, limit=limit, scan_cap=scan_cap)
    return [FailureSummary(**{**row, "kind": read_kind(row["kind"])}) for row in rows]


def window_start(window: float | dt.timedelta, now: dt.datetime, *, what: str) -> dt.datetime:
    """``now - window``; a window that is not a duration, or reaches past year 1, is a
    ``ValueError`` that names ``what`` (never an ``OverflowError`` from deep inside)."""
    try:
        if not isinstance(window, dt.timedelta):
            window = dt.timedelta(seconds=float(window))
        return now - window
    except (OverflowError, TypeError, ValueError):
        raise ValueError(f"{what} {window!r} is not a usable duration: give seconds or a "
                         "timedelta shorter than the time since year 1") from None


def throughput(*, minutes: int = 60, queue: str | None = None,
               now: dt.datetime | None = None) -> list[ThroughputPoint]:
    """Completed and failed (dead) jobs per minute over the last ``minutes``, oldest first.

    Every minute is present, with zeros where nothing finished (one query).
    """
    now = (now or vendor.now()).astimezone(dt.timezone.utc)
    last = now.replace(second=0, microsecond=0)
    first = last - dt.timedelta(minutes=minutes - 1)
    buckets = {first + dt.timedelta(minutes=i): [0, 0] for i in range(minutes)}
    for row in reports.finished_per_minute(first, queue=queue):
        bucket = buckets.get(row["minute"])
        if bucket is not None:
            bucket[0 if row["state"] == JobState.COMPLETED else 1] += row["count"]
    return [ThroughputPoint(minute, done, failed) for minute, (done, failed) in buckets.items()]


@dataclass(frozen=True)
class TimingSummary:
    """How long one queue's jobs that completed recently waited and ran (seconds).

    ``wait``: from when the last attempt was due (``available_at``) to its start;
    ``run``: from its start to the completion. Each maps ``p50``, ``p95`` and ``p99``
    to a value; ``jobs`` is how many completions were read (at most the sample).
    """

    queue: str
    jobs: int
    wait: dict[str, float]
    run: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


PERCENTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))


def timing_summary(*, minutes: int = 60, sample: int = 20_000, queue: str | None = None,
                   now: dt.datetime | None = None) -> list[TimingSummary]:
    """Queue wait and run time percentiles per queue over the jobs that completed in the last
    ``minutes`` (the newest ``sample`` of them: one index range, its cost capped), by name."""
    now = now or vendor.now()
    waits: dict[str, list[float]] = {}
    runs: dict[str, list[float]] = {}
    for name, available_at, started_at, completed_at in reports.recent_completions(
            now - dt.timedelta(minutes=minutes), sample, queue=queue):
        if started_at is None or completed_at is None:
            continue
        if available_at is not None:
            waits.setdefault(name, []).append(
                max(0.0, (started_at - available_at).total_seconds()))
        runs.setdefault(name, []).append(max(0.0, (completed_at - started_at).total_seconds()))
    return [TimingSummary(name, len(runs[name]), _percentiles(waits.get(name, [])),
                          _percentiles(runs[name])) for name in sorted(runs)]


def _percentiles(values: list[float]) -> dict[str, float]:
    """Nearest-rank percentiles (every value is one that was measured)."""
    if not values:
        return {}
    ordered = sorted(values)
    return {name: ordered[min(len(ordered) - 1, max(0, math.ceil(len(ordered) * share) - 1))]
            for name, share in PERCENTILES}
