"""Internal: claiming from a queue with limits (global, partitioned, rate) — no leader.

Queues without limits keep the one-statement claim of ``claims.py``. A limited
queue's claim is one short transaction that first locks the queue's row
(``SELECT … FOR UPDATE``; SQLite's single writer already serialises it), so the
limited claims of one queue run one at a time across every node, and each sees
what the previous one committed:

1. ``global_limit``: the free slots are the limit minus the queue's claimed and
   running jobs (counted on the ``(queue, state)`` index).
2. ``rate_limit``: the budget left in the current fixed window, kept on the
   queue row (``rate_window``, ``rate_count``) and advanced in the same
   transaction — no scan of history.
3. ``partition``: due jobs are ranked per partition key (``ROW_NUMBER()``),
   and a partition takes at most its limit minus its executing jobs; full
   partitions are filtered out before the candidate window, so they never
   hide the jobs of other partitions.

The claim takes the smallest of the node's free slots and those budgets. Acks
need no lock: finishing a job only ever frees capacity.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from dataclasses import dataclass
from typing import Any

from django.db.models import F

from kathikon.limits import Limits
from kathikon.models import Job, Queue, RateWindow
from kathikon.states import CLAIMABLE_STATES, EXECUTING_STATES, JobState
from kathikon.storable import MAX_INT
from kathikon.storage import vendor
from kathikon.storage.fragments import CLAIMABLE_SQL, EXECUTING_SQL
from kathikon.storage.partitions import on_live
from kathikon.storage.rows import JOB_COLUMNS, fetch_jobs
from kathikon.storage.uniques import key_after, key_after_sql
from kathikon.unique import holds

CANDIDATES = 1000  # due jobs ranked per partitioned claim (full partitions excluded first)


@dataclass(slots=True)
class Claimed:
    """What a limited claim took, and which limit (if any) held it short of the request."""

    jobs: list[Job]
    held_by: str | None = None  # "global_limit" | "rate_limit" | "partition" | None


@dataclass(frozen=True, slots=True)
class Usage:
    """A queue's use of its limits right now (for the admin and ``kathikon_ops``)."""

    executing: int
    partitions: dict[str, int]  # partition key → executing jobs (partitioned queues)
    rate_used: int
    rate_window: dt.datetime | None


def claim_limited_jobs(queue: str, limit: int, node: str, limits: Limits, *,
                       into: str = JobState.RUNNING, now: dt.datetime | None = None) -> Claimed:
    """Claim up to ``limit`` due jobs of ``queue`` within ``limits`` (see the module)."""
    if limit <= 0:
        return Claimed([])
    for _ in range(3):
        if vendor.is_postgres() and not limits.key_by:
            claimed = _claim_postgres(queue, limit, node, limits, into, now)
            if claimed is not None:
                return claimed
        else:
            with vendor.atomic():
                row = _lock_queue(queue)
                if row is not None:
                    return _claim_locked(row, limit, node, limits, into, now)
        # Created in its own transaction: creating it inside the claim's (several claimers
        # at once) would deadlock on MariaDB, each holding a shared lock from the clash.
        Queue.objects.using(vendor.alias()).get_or_create(name=queue)
    raise RuntimeError(f"queue row {queue!r} vanished while claiming")


def _claim_locked(row: Queue, limit: int, node: str, limits: Limits, into: str,
                  now: dt.datetime | None) -> Claimed:
    """The claim, inside the transaction holding the queue row's lock."""
    queue, using = row.name, vendor.alias()
    if row.paused:
        return Claimed([])
    clock = now or vendor.db_now()
    budget, held_by = limit, None
    if limits.global_limit:
        executing = _jobs().filter(queue=queue, state__in=EXECUTING_STATES).count()
        if limits.global_limit - executing < budget:
            budget, held_by = max(0, limits.global_limit - executing), "global_limit"
    window, used, partition_window = None, 0, None
    if limits.rate_allowed and limits.rate_period and limits.rate_by:
        partition_window = window_start(clock, limits.rate_period)
        if row.rate_window != partition_window:  # a new window: forget the old counts
            RateWindow.objects.using(using).filter(
                queue=queue, window_start__lt=partition_window).delete()
            Queue.objects.using(using).filter(name=queue).update(
                rate_window=partition_window, rate_count=0)
    elif limits.rate_allowed and limits.rate_period:
        window = window_start(clock, limits.rate_period)
        used = row.rate_count if row.rate_window == window else 0
        if limits.rate_allowed - used < budget:
            budget, held_by = max(0, limits.rate_allowed - used), "rate_limit"
    if budget <= 0:
        return Claimed([], held_by if _any_due(queue, clock) else None)
    jobs, more, keys = _pick(queue, budget, limits, clock, partition_window)
    if len(jobs) >= limit:
        held_by = None
    elif held_by or limits.key_by:  # short: a limit, or just no more due jobs?
        if more is None:
            more = _any_due(queue, clock, besides=[job.id for job in jobs])
        held_by = (held_by or ("partition" if limits.partition_by else "rate_limit")
                   if more else None)
    if not jobs:
        return Claimed([], held_by)
    if partition_window is not None:
        _count_partition_starts(queue, partition_window,
                                [keys[job.id] for job in jobs if job.id in keys])
    _jobs().filter(id__in=[job.id for job in jobs]).update(
        state=into, attempts=F("attempts") + 1, started_at=clock, attempted_by=node,
        lease=F("lease") + 1, unique_key=key_after(into))
    if window is not None:
        Queue.objects.using(using).filter(name=queue).update(
            rate_window=window, rate_count=used + len(jobs))
    for job in jobs:  # the rows are locked: these are exactly the values written
        job.state, job.started_at, job.attempted_by = into, clock, node
        job.attempts += 1
        job.lease += 1
        if not holds(job.unique_states, into):
            job.unique_key = None
    jobs.sort(key=lambda job: (-job.priority, job.available_at))
    return Claimed(jobs, held_by)


_PG_LOCK = ("SELECT paused, rate_window, rate_count, clock_timestamp() FROM kathikon_queue "
            "WHERE name = %s FOR UPDATE")
_PG_EXECUTING = (f"SELECT count(*) FROM kathikon_job WHERE queue = %s "
                 f"AND state IN ({EXECUTING_SQL}) /*live*/")
_PG_CLAIM = f"""
WITH picked AS (
    SELECT id FROM kathikon_job
    WHERE queue = %(queue)s AND state IN ({CLAIMABLE_SQL}) AND available_at <= %(now)s
      AND NOT suspect /*live*/
    ORDER BY priority DESC, available_at
    LIMIT %(budget)s
    FOR UPDATE SKIP LOCKED),
claimed AS (
    UPDATE kathikon_job AS j
    SET state = %(into)s, attempts = j.attempts + 1, started_at = %(now)s,
        attempted_by = %(node)s, lease = j.lease + 1, unique_key = {{key}}
    FROM picked WHERE j.id = picked.id /*live:j*/
    RETURNING {", ".join("j." + c.strip('"') for c in JOB_COLUMNS.split(", "))}){{bump}}
SELECT * FROM claimed
"""
_PG_BUMP = """,
bump AS (
    UPDATE kathikon_queue SET rate_window = %(window)s,
        rate_count = %(used)s + (SELECT count(*) FROM claimed)
    WHERE name = %(queue)s)"""


def _claim_postgres(queue: str, limit: int, node: str, limits: Limits, into: str,
                    now: dt.datetime | None) -> Claimed | None:
    """PostgreSQL without partitions: lock the queue row (and read the clock), count the
    executing jobs, then pick, claim and advance the rate window in one statement. None if
    the queue's row is missing."""
    with vendor.atomic(), vendor.connection().cursor() as cursor:
        cursor.execute(_PG_LOCK, [queue])
        found = cursor.fetchone()
        if found is None:
            return None
        paused, rate_window, rate_count, clock = found
        if paused:
            return Claimed([])
        clock = now or clock
        budget, held_by = limit, None
        window, used = None, 0
        if limits.rate_allowed and limits.rate_period:
            window = window_start(clock, limits.rate_period)
            used = rate_count if rate_window == window else 0
            if limits.rate_allowed - used < budget:
                budget, held_by = max(0, limits.rate_allowed - used), "rate_limit"
        if limits.global_limit:  # a statement of its own: its snapshot follows the lock
            cursor.execute(on_live(_PG_EXECUTING), [queue])
            executing = cursor.fetchone()[0]
            if limits.global_limit - executing < budget:
                budget, held_by = max(0, limits.global_limit - executing), "global_limit"
        if budget <= 0:
            return Claimed([], held_by if _any_due(queue, clock) else None)
        # The pick's LIMIT is a constant: the planner walks the claim index and stops.
        sql = on_live(_PG_CLAIM.format(key=key_after_sql(into, "j"),
                                       bump=_PG_BUMP if window is not None else ""))
        jobs = fetch_jobs(cursor, sql, {"queue": queue, "now": clock, "budget": budget,
                                        "into": into, "node": node, "window": window,
                                        "used": used})
        short = len(jobs) < limit
        if not (short and held_by and _any_due(queue, clock, besides=[j.id for j in jobs])):
            held_by = None
    jobs.sort(key=lambda job: (-job.priority, job.available_at))
    return Claimed(jobs, held_by)


def window_start(clock: dt.datetime, period: float) -> dt.datetime:
    """The start of the fixed window holding ``clock``: windows are aligned to the epoch, so
    every node computes the same ones."""
    start = math.floor(clock.timestamp() / period) * period
    return dt.datetime.fromtimestamp(start, tz=dt.timezone.utc)


def queue_usage(queue: str, limits: Limits, now: dt.datetime | None = None) -> Usage:
    """How much of its limits ``queue`` uses now: executing jobs, per partition, rate window."""
    executing = _jobs().filter(queue=queue, state__in=EXECUTING_STATES).count()
    row = Queue.objects.using(vendor.alias()).filter(name=queue).first()
    used, window = rate_use(row, limits, now)
    return Usage(executing=executing, partitions=partition_use(queue, limits),
                 rate_used=used, rate_window=window)


def partition_use(queue: str, limits: Limits) -> dict[str, int]:
    """Partition key → executing jobs of ``queue`` (empty unless it is partitioned)."""
    if not limits.key_by:
        return {}
    sql = (f"SELECT {_partition_sql(limits)}, COUNT(*) FROM kathikon_job "
           f"WHERE queue = %s AND state IN ({EXECUTING_SQL}) GROUP BY 1")
    with vendor.connection().cursor() as cursor:
        cursor.execute(sql, [queue])
        return {str(key): int(count) for key, count in cursor.fetchall()}


def rate_use(row: Queue | None, limits: Limits,
             now: dt.datetime | None = None) -> tuple[int, dt.datetime | None]:
    """Starts counted in the current rate window of the queue ``row``, and its start."""
    if row is None or not (limits.rate_allowed and limits.rate_period):
        return 0, None
    window = window_start(now or vendor.db_now(), limits.rate_period)
    return (row.rate_count if row.rate_window == window else 0), window


def _jobs() -> Any:
    return Job.objects.using(vendor.alias())


def _lock_queue(queue: str) -> Queue | None:
    """The queue's row, locked for this transaction; None if it does not exist."""
    rows = Queue.objects.using(vendor.alias())
    query = rows if vendor.vendor() == "sqlite" else rows.select_for_update()
    return query.filter(name=queue).first()


def _any_due(queue: str, clock: dt.datetime, besides: list[uuid.UUID] | None = None) -> bool:
    query = _jobs().filter(queue=queue, state__in=CLAIMABLE_STATES, available_at__lte=clock)
    if besides:
        query = query.exclude(id__in=besides)
    return bool(query.exists())


def _pick(queue: str, budget: int, limits: Limits, clock: dt.datetime,
          partition_window: dt.datetime | None
          ) -> tuple[list[Job], bool | None, dict[uuid.UUID, str]]:
    """Up to ``budget`` due jobs in claim order, locked (rows others hold are skipped),
    whether due jobs were passed over (None: not known without another query), and each
    picked job's partition key (partitioned queues)."""
    locking = vendor.vendor() != "sqlite"
    if limits.key_by:
        ranked, more = _rank_partitions(queue, budget, limits, clock, partition_window)
        if not ranked:
            return [], (True if more else None), {}
        query = _jobs().filter(id__in=list(ranked), state__in=CLAIMABLE_STATES, suspect=False)
        if locking:
            query = query.select_for_update(skip_locked=True)
        found = {job.id: job for job in query}
        return [found[pk] for pk in ranked if pk in found], (more or None), ranked
    query = (_jobs().filter(queue=queue, state__in=CLAIMABLE_STATES, available_at__lte=clock,
                            suspect=False)
             .order_by("-priority", "available_at"))
    if locking:
        query = query.select_for_update(skip_locked=True)
    return list(query[:budget]), None, {}


def _count_partition_starts(queue: str, window: dt.datetime, keys: list[str]) -> None:
    """Add the claimed jobs' starts to their partitions' counts (under the queue lock)."""
    rows = RateWindow.objects.using(vendor.alias())
    claimed: dict[str, int] = {}
    for key in keys:
        claimed[key] = claimed.get(key, 0) + 1
    known = {row.partition_key: row for row in rows.filter(queue=queue,
                                                           partition_key__in=list(claimed))}
    updated = [RateWindow(queue=queue, partition_key=key, window_start=window,
                          starts=n + (known[key].starts if key in known
                                      and known[key].window_start == window else 0))
               for key, n in claimed.items()]
    target: dict[str, Any] = ({"unique_fields": ["queue", "partition_key"]}
              if vendor.connection().features.supports_update_conflicts_with_target else {})
    rows.bulk_create(updated, update_conflicts=True, update_fields=["window_start", "starts"],
                     **target)


def _partition_sql(limits: Limits) -> str:
    """The partition key of a job row as SQL (NULL keys form the partition '')."""
    key = limits.partition_arg
    if key is None:
        return "worker"
    kind = vendor.vendor()
    if kind == "postgresql":
        return f"SUBSTR(COALESCE(args->>'{key}', ''), 1, 255)"
    if kind == "sqlite":
        return f"SUBSTR(COALESCE(CAST(json_extract(args, '$.{key}') AS TEXT), ''), 1, 255)"
    return f"SUBSTR(COALESCE(JSON_UNQUOTE(JSON_EXTRACT(args, '$.{key}')), ''), 1, 255)"


def _rank_partitions(queue: str, budget: int, limits: Limits, clock: dt.datetime,
                     partition_window: dt.datetime | None
                     ) -> tuple[dict[uuid.UUID, str], bool]:
    """The due ids a partitioned claim may take, in claim order (at most ``budget``) with
    their partition keys, and whether the candidate window held more due jobs than that.

    A partition takes at most its concurrency limit minus its executing jobs and, with a
    rate limit per partition, the starts left in its window.
    """
    part = _partition_sql(limits)
    per = int(limits.partition_limit or MAX_INT)
    connection = vendor.connection()
    stamp = connection.ops.adapt_datetimefield_value(clock)
    allowance, rate_join, rate_full, rate_params = "%s - COALESCE(r.n, 0)", "", "", []
    if partition_window is not None:
        least = "MIN" if vendor.vendor() == "sqlite" else "LEAST"
        allowance = f"{least}(%s - COALESCE(r.n, 0), %s - COALESCE(u.n, 0))"
        window = connection.ops.adapt_datetimefield_value(partition_window)
        rate_join = ("LEFT JOIN (SELECT partition_key AS p, starts AS n FROM kathikon_ratewindow "
                     "WHERE queue = %s AND window_start = %s) AS u ON u.p = c.p")
        rate_full = (f"AND {part} NOT IN (SELECT partition_key FROM kathikon_ratewindow "
                     "WHERE queue = %s AND window_start = %s AND starts >= %s)")
        rate_params = [queue, window, limits.rate_allowed]
    sql = f"""
    SELECT c.id, c.p, CASE WHEN c.rn <= {allowance} THEN 1 ELSE 0 END FROM (
        SELECT id, priority, available_at, p,
               ROW_NUMBER() OVER (PARTITION BY p ORDER BY priority DESC, available_at) AS rn
        FROM (SELECT id, priority, available_at, {part} AS p FROM kathikon_job
              WHERE queue = %s AND state IN ({CLAIMABLE_SQL}) AND available_at <= %s
                AND NOT suspect AND {part} NOT IN (
                    SELECT {part} FROM kathikon_job
                    WHERE queue = %s AND state IN ({EXECUTING_SQL})
                    GROUP BY {part} HAVING COUNT(*) >= %s)
                {rate_full}
              ORDER BY priority DESC, available_at
              LIMIT {CANDIDATES}) AS due
    ) AS c
    LEFT JOIN (SELECT {part} AS p, COUNT(*) AS n FROM kathikon_job
               WHERE queue = %s AND state IN ({EXECUTING_SQL}) GROUP BY {part}) AS r
      ON r.p = c.p
    {rate_join}
    ORDER BY c.priority DESC, c.available_at
    """
    params: list[Any] = [per]
    if partition_window is not None:
        params.append(limits.rate_allowed)
    params += [queue, stamp, queue, per, *rate_params, queue]
    if partition_window is not None:
        params += rate_params[:2]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    eligible = [(pk if isinstance(pk, uuid.UUID) else uuid.UUID(pk), str(key))
                for pk, key, ok in rows if ok]
    return dict(eligible[:budget]), len(rows) > min(len(eligible), budget)
