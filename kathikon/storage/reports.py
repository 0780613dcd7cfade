"""Internal: the read models behind reports, the dashboard, the CLI and the admin.

Every function is one or two aggregate statements whatever the number of
queues or jobs, and each one is shaped to use an index of ``kathikon_job``
(``(queue, state)``, ``(worker, state)``, ``(state, id)``, ``completed_at``)
so the pages stay fast with millions of rows. On PostgreSQL the first three hold
resting jobs only (models.Job.Meta): executing jobs are reached through
``kathikon_job_executing`` and completed ones through ``kathikon_job_completed``
and ``kathikon_job_done``, with each state written out as a constant.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Iterable
from contextlib import nullcontext
from typing import Any

from django.db import transaction
from django.db.models import Count, DateTimeField, ExpressionWrapper, Q, Value
from django.db.models.functions import TruncMinute

from kathikon.models import Job, JobEvent, Node, WorkflowStep
from kathikon.states import (
    CLAIMABLE_STATES,
    EXECUTING_STATES,
    LISTED_STATES,
    RESTING_STATES,
    TERMINAL_STATES,
    JobState,
)
from kathikon.storage import vendor

FINISHED_STATES = (JobState.COMPLETED, JobState.DEAD)


def _jobs() -> Any:
    """Jobs to read: on ``READ_DATABASE`` when one is set (the reports tolerate its lag)."""
    return Job.objects.using(vendor.read_alias()).order_by()


def queue_state_counts(cap: int | None = None) -> list[dict[str, Any]]:
    """``[{"queue", "state", "count", "estimated"}]`` for every queue holding jobs.

    On PostgreSQL one statement counts each (queue, state) on its own index (see
    ``_postgres_counts``); with ``cap`` each count stops at ``cap`` rows and a count
    that reaches it is replaced by an estimate from the planner's statistics
    (``estimated`` True; one more query): the cost no longer grows with the table.
    Elsewhere one GROUP BY, an index-only scan of ``(queue, state, id)``.
    """
    if vendor.is_postgres():
        return _postgres_counts(cap)
    rows = _jobs().values("queue", "state").annotate(count=Count("id"))
    return [{"queue": row["queue"], "state": row["state"], "count": row["count"],
             "estimated": False} for row in rows]


def _postgres_counts(cap: int | None) -> list[dict[str, Any]]:
    """One count per (queue, state), each state written out as a constant so the planner
    counts it on its own index: ``(queue, state, id)`` for the resting states, the claim
    index for available, the executing jobs' index for claimed and running,
    ``kathikon_job_done`` for completed (the general indexes leave executing, completed
    and available jobs out)."""
    table = vendor.table(Job)
    limit = "" if cap is None else "LIMIT %s"
    counts = ",\n".join(
        f"(SELECT count(*) FROM (SELECT 1 FROM {table} AS j WHERE j.queue = q.queue "
        f"AND j.state = %s {limit}) AS c)" for _ in JobState.values)
    cte, params = _queues_cte()
    sql = f"WITH RECURSIVE {cte} SELECT q.queue, {counts} FROM queues AS q"
    for state in JobState.values:
        params += [state] if cap is None else [state, cap + 1]
    # The planner guesses ~200 queues from the recursive CTEs, so the capped counts' cost
    # passes jit_above_cost: compiling them took 160 ms of a 180 ms run at 10M jobs.
    with (transaction.atomic(using=vendor.read_alias()) if cap is not None else nullcontext()), \
            vendor.read_connection().cursor() as cursor:
        if cap is not None:
            cursor.execute("SET LOCAL jit = off")
        cursor.execute(sql, params)
        counted = [(row[0], state, count) for row in cursor.fetchall()
                   for state, count in zip(JobState.values, row[1:], strict=True)]
        share: dict[tuple[str, str], float] = {}
        total = 0.0
        if cap is not None and any(count > cap for _, _, count in counted):
            # The planner's statistics in one query: rows in the table and the share of
            # each common queue and state (a count above the cap is total x both shares).
            cursor.execute("""
                SELECT c.reltuples, s.attname, s.most_common_vals::text::text[],
                       s.most_common_freqs
                FROM pg_class AS c LEFT JOIN pg_stats AS s
                  ON s.schemaname = current_schema() AND s.tablename = c.relname
                 AND s.attname IN ('queue', 'state')
                WHERE c.oid = %s::regclass""", [Job._meta.db_table])
            for reltuples, column, values, freqs in cursor.fetchall():
                total = max(total, float(reltuples or 0))
                for value, freq in zip(values or [], freqs or [], strict=False):
                    share[(column, value)] = float(freq)
    rows = []
    for queue, state, count in counted:
        estimated = cap is not None and count > cap
        if cap is not None and estimated:  # (cap tested again for the type checker)
            guess = total * share.get(("queue", queue), 0.0) * share.get(("state", state), 0.0)
            count = max(int(guess), cap + 1)
        if count:
            rows.append({"queue": queue, "state": state, "count": count, "estimated": estimated})
    return rows


def queue_activity(now: dt.datetime) -> list[dict[str, Any]]:
    """Per queue: the oldest due claimable job, and jobs finished in the last minute and hour.

    One statement (a UNION ALL of two small aggregates): the first walks the
    claim index, the second the ``completed_at`` index, so neither reads the
    whole table. Rows are ``{"queue", "state", "oldest_available_at",
    "last_hour", "last_minute"}``; ``state`` is None on "oldest" rows.
    """
    hour_ago, minute_ago = now - dt.timedelta(hours=1), now - dt.timedelta(minutes=1)
    q = vendor.read_connection().ops.quote_name
    queue, state, available, completed = (q("queue"), q("state"), q("available_at"),
                                          q("completed_at"))
    oldest = f"""
        SELECT {queue}, NULL, MIN({available}), 0, 0 FROM {vendor.table(Job)}
        WHERE {state} IN (%s, %s) AND {available} <= %s GROUP BY {queue}"""
    params: list[Any] = [*CLAIMABLE_STATES, now]
    if vendor.is_postgres():
        oldest, params = _oldest_due_postgres(now)
    sql = f"""{oldest}
        UNION ALL
        SELECT {queue}, {state}, NULL, COUNT(*),
               SUM(CASE WHEN {completed} >= %s THEN 1 ELSE 0 END)
        FROM {vendor.table(Job)}
        WHERE {completed} >= %s AND {state} IN (%s, %s) GROUP BY {queue}, {state}
    """
    params += [minute_ago, hour_ago, *FINISHED_STATES]
    with vendor.read_connection().cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [{"queue": name, "state": kind, "oldest_available_at": _parse_time(oldest),
             "last_hour": int(hour or 0), "last_minute": int(minute or 0)}
            for name, kind, oldest, hour, minute in rows]


def _oldest_due_postgres(now: dt.datetime) -> tuple[str, list[Any]]:
    """Each queue's oldest due claimable job without reading the whole backlog.

    A loose scan of the claim index ``(queue, priority DESC, available_at)``: hop
    from queue to queue and, within one, from priority to priority; the first due
    entry of each (queue, priority) is that level's oldest. A few index probes per
    queue and priority, whether 10 or 10 million jobs wait.
    """
    table = vendor.table(Job)
    claimable = "state IN (%s, %s)"  # the claim index's own predicate, so it is used
    sql = f"""
        SELECT queue, NULL, MIN(first_due), 0, 0 FROM (
            WITH RECURSIVE queues AS (
                (SELECT queue FROM {table} WHERE {claimable} ORDER BY queue LIMIT 1)
                UNION ALL
                SELECT (SELECT queue FROM {table} WHERE {claimable} AND queue > queues.queue
                        ORDER BY queue LIMIT 1)
                FROM queues WHERE queues.queue IS NOT NULL
            ), levels AS (
                SELECT queue, (SELECT priority FROM {table}
                               WHERE {claimable} AND queue = queues.queue
                               ORDER BY priority DESC LIMIT 1) AS priority
                FROM queues WHERE queue IS NOT NULL
                UNION ALL
                SELECT queue, (SELECT priority FROM {table}
                               WHERE {claimable} AND queue = levels.queue
                                 AND priority < levels.priority
                               ORDER BY priority DESC LIMIT 1)
                FROM levels WHERE priority IS NOT NULL
            )
            SELECT queue, (SELECT available_at FROM {table}
                           WHERE {claimable} AND queue = levels.queue
                             AND priority = levels.priority AND available_at <= %s
                           ORDER BY available_at LIMIT 1) AS first_due
            FROM levels WHERE priority IS NOT NULL
        ) AS due WHERE first_due IS NOT NULL GROUP BY queue"""
    return sql, [*CLAIMABLE_STATES * 5, now]


def recent_completions(since: dt.datetime, limit: int,
                       queue: str | None = None) -> list[tuple[str, Any, Any, Any]]:
    """``(queue, available_at, started_at, completed_at)`` of the newest ``limit`` jobs that
    completed since ``since``: a range of the ``completed_at`` index, newest first."""
    query = _jobs().filter(completed_at__gte=since, state=JobState.COMPLETED)
    if queue is not None:
        query = query.filter(queue=queue)
    return list(query.order_by("-completed_at").values_list(
        "queue", "available_at", "started_at", "completed_at")[:limit])


def finished_per_minute(since: dt.datetime, queue: str | None = None) -> list[dict[str, Any]]:
    """``[{"minute", "state", "count"}]`` for jobs that completed or died since ``since``."""
    query = _jobs().filter(completed_at__gte=since, state__in=FINISHED_STATES)
    if queue is not None:
        query = query.filter(queue=queue)
    rows = query.annotate(minute=TruncMinute("completed_at", tzinfo=dt.timezone.utc)).values(
        "minute", "state").annotate(count=Count("id"))
    return [{"minute": _aware(row["minute"]), "state": row["state"], "count": row["count"]}
            for row in rows]


# The last element of the ``errors`` JSON array, per vendor: ``{field}`` is kind, message, at.
_LAST_ERROR = {
    "postgresql": "({errors} -> -1 ->> '{field}')",
    # MySQL rejects the path '$[-1]' of an empty array, hence the CASE.
    "mysql": ("(CASE WHEN JSON_LENGTH({errors}) > 0 THEN JSON_UNQUOTE(JSON_EXTRACT({errors}, "
              "CONCAT('$[', JSON_LENGTH({errors}) - 1, '].{field}'))) END)"),
    "sqlite": "json_extract({errors}, '$[#-1].{field}')",  # SQLite >= 3.31
}


def failure_rows(since: dt.datetime, limit: int = 100,
                 scan_cap: int | None = None) -> list[dict[str, Any]]:
    """Dead and retryable jobs grouped by worker and their last error's kind (one query).

    Bounded to jobs that failed since ``since``: dead jobs by ``completed_at``;
    retryable jobs by ``available_at``, which is never earlier than their last
    failure. ``last_seen`` is the newest last-error time (ISO text, parsed here).
    With ``scan_cap`` only the newest ``scan_cap`` dead and ``scan_cap`` retryable
    jobs of the window are grouped (each walks the ``(state, id)`` index newest
    first), so the cost stays flat however many jobs failed.
    """
    connection = vendor.read_connection()
    quote = connection.ops.quote_name
    template = _LAST_ERROR.get(connection.vendor, _LAST_ERROR["sqlite"])
    errors = quote("errors")

    def last(field: str) -> str:
        return template.format(errors=errors, field=field)

    table, state, worker = vendor.table(Job), quote("state"), quote("worker")
    if scan_cap is None:
        source = f"""
            SELECT {worker}, {errors} FROM {table}
            WHERE (({state} = %s AND {quote("completed_at")} >= %s)
                   OR ({state} = %s AND {quote("available_at")} >= %s))"""
        params: list[Any] = [JobState.DEAD, since, JobState.RETRYABLE, since]
    else:
        source = f"""
            SELECT * FROM (SELECT {worker}, {errors} FROM {table}
                           WHERE {state} = %s AND {quote("completed_at")} >= %s
                           ORDER BY {quote("id")} DESC LIMIT %s) AS dead
            UNION ALL
            SELECT * FROM (SELECT {worker}, {errors} FROM {table}
                           WHERE {state} = %s AND {quote("available_at")} >= %s
                           ORDER BY {quote("id")} DESC LIMIT %s) AS retryable"""
        params = [JobState.DEAD, since, scan_cap, JobState.RETRYABLE, since, scan_cap]
    sql = f"""
        SELECT {worker}, {last("kind")} AS kind, COUNT(*), MAX({last("at")}),
               MAX({last("message")})
        FROM ({source}) AS failed
        GROUP BY {worker}, kind
        ORDER BY COUNT(*) DESC
        LIMIT %s
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, limit])
        rows = cursor.fetchall()
    return [{"worker": worker, "kind": kind or "(no error recorded)", "count": count,
             "last_seen": _parse_time(at), "sample_message": message or ""}
            for worker, kind, count, at, message in rows]


def _live_nodes(within: float) -> Any:
    """Nodes not stopped whose heartbeat is at most ``within`` seconds old by the
    database's clock, as the lifeline judges them."""
    from kathikon.storage.nodes import DatabaseNow

    cutoff = ExpressionWrapper(DatabaseNow() - Value(dt.timedelta(seconds=within)),
                               output_field=DateTimeField())
    return (Node.objects.using(vendor.alias()).exclude(status=Node.Status.STOPPED)
            .filter(heartbeat_at__gte=cutoff))


def live_node_queues(within: float) -> set[str]:
    """Queues run by nodes not stopped whose heartbeat is at most ``within`` seconds old.

    One query; the cut-off is computed on the database's clock, as the lifeline's is.
    """
    rows = _live_nodes(within).values_list("queues", flat=True)
    return {name for queues in rows for name in (queues or {})}


def live_node_unknown_workers(within: float) -> list[tuple[str, str, str]]:
    """``(worker path, node, since)`` for each worker class a live node (heartbeat at most
    ``within`` seconds old) holds jobs back for, since it cannot import it. One query."""
    rows = _live_nodes(within).values_list("name", "unknown_workers")
    return sorted((path, node, str(since)) for node, unknown in rows
                  for path, since in (unknown or {}).items())


def distinct_values(column: str, limit: int = 200) -> list[str]:
    """Distinct ``queue`` or ``worker`` values of the jobs, sorted, at most ``limit``.

    PostgreSQL has no loose index scan, so recursive CTEs hop through the indexes one
    value at a time: the resting jobs' ``(column, state, id)``, the completed jobs'
    ``(queue, worker)`` (one hop per pair for workers) and the few executing jobs.
    Milliseconds on millions of rows.
    """
    if column not in ("queue", "worker"):
        raise ValueError(f"no distinct values for {column!r}")
    if not vendor.is_postgres():
        return list(_jobs().order_by(column).values_list(column, flat=True).distinct()[:limit])
    if column == "queue":
        cte, params = _queues_cte()
        sql = f"WITH RECURSIVE {cte} SELECT queue FROM queues"
    else:
        sql, params = _workers_sql(20 * limit)
    with vendor.read_connection().cursor() as cursor:
        cursor.execute(f"SELECT * FROM ({sql}) AS v ORDER BY 1 LIMIT %s", [*params, limit])
        return [row[0] for row in cursor.fetchall()]


def _loose_scan(name: str, column: str, table: str, where: str) -> str:
    """A recursive CTE ``name`` of the distinct ``column`` values of the rows matching
    ``where``: one index probe per value (PostgreSQL has no loose index scan)."""
    return f"""{name} AS (
            (SELECT {column} FROM {table} WHERE {where} ORDER BY {column} LIMIT 1)
            UNION ALL
            SELECT (SELECT {column} FROM {table} WHERE {where} AND {column} > s.{column}
                    ORDER BY {column} LIMIT 1)
            FROM {name} AS s WHERE s.{column} IS NOT NULL
        )"""


def _queues_cte() -> tuple[str, list[Any]]:
    """The queues that hold jobs (PostgreSQL), a ``queues`` CTE for ``WITH RECURSIVE``.

    A loose scan of the resting jobs' ``(queue, state, id)``, of the claim index (available
    jobs are only there) and of the completed jobs' ``(queue, worker)``, and the executing
    jobs' queues (few rows). Each WHERE repeats its index's condition, states as
    constants, so the planner can use the partial index.
    """
    table, done = vendor.table(Job), "state = %s"
    listed, claimable = _in(LISTED_STATES), _in(CLAIMABLE_STATES)
    sql = f"""
        {_loose_scan("resting", "queue", table, listed)},
        {_loose_scan("claimable", "queue", table, claimable)},
        {_loose_scan("done", "queue", table, done)}, queues AS (
            SELECT queue FROM resting WHERE queue IS NOT NULL
            UNION SELECT queue FROM claimable WHERE queue IS NOT NULL
            UNION SELECT queue FROM done WHERE queue IS NOT NULL
            UNION SELECT queue FROM {table} WHERE {_in(EXECUTING_STATES)}
        )"""
    return sql, [*LISTED_STATES, *LISTED_STATES, *CLAIMABLE_STATES, *CLAIMABLE_STATES,
                 JobState.COMPLETED, JobState.COMPLETED, *EXECUTING_STATES]


def _workers_sql(hops: int) -> tuple[str, list[Any]]:
    """The workers that hold jobs (PostgreSQL): resting jobs by a loose scan of ``(worker,
    state, id)``, completed ones by one hop per ``(queue, worker)`` pair (at most ``hops``),
    executing ones directly."""
    table, resting, done = vendor.table(Job), _in(RESTING_STATES), "state = %s"
    sql = f"""
        WITH RECURSIVE {_loose_scan("resting", "worker", table, resting)}, done AS (
            (SELECT queue, worker, 1 AS hops FROM {table} WHERE {done}
             ORDER BY queue, worker LIMIT 1)
            UNION ALL
            SELECT n.queue, n.worker, d.hops + 1 FROM done AS d CROSS JOIN LATERAL (
                SELECT queue, worker FROM {table} WHERE {done}
                   AND (queue, worker) > (d.queue, d.worker)
                 ORDER BY queue, worker LIMIT 1) AS n
            WHERE d.hops < %s
        )
        SELECT worker FROM resting WHERE worker IS NOT NULL
        UNION SELECT worker FROM done
        UNION SELECT worker FROM {table} WHERE {_in(EXECUTING_STATES)}"""
    return sql, [*RESTING_STATES, *RESTING_STATES, JobState.COMPLETED, JobState.COMPLETED,
                 hops, *EXECUTING_STATES]


def _in(states: Iterable[str]) -> str:
    """``state IN (%s, …)``: one placeholder per state (constants for the planner)."""
    return f"state IN ({', '.join('%s' for _ in states)})"


def matching(column: str, value: str) -> Q:
    """The filter ``column = value`` for ``queue`` or ``worker``, shaped for the indexes.

    On PostgreSQL the general indexes hold resting jobs only, so a bare ``worker = 'x'``
    has no index path to x's completed and executing jobs: for a rare value the planner
    walks the whole table (0.85 s at 10M jobs). Spelled as resting OR available OR
    completed OR executing, each branch matches one partial index (available jobs: the
    worker's index, or the claim index for a queue) and a rare value is a BitmapOr of a
    few probes; a common one is still a walk of the primary key. Completed jobs are
    found by ``(queue, worker)``, so a worker's branch names every queue that holds
    completed jobs (the same loose scan as the queue filter's choices; a queue whose very
    first job completes between that scan and the list is missed on that page); past
    ``QUEUE_LIST_CAP`` of them the filter stays bare.
    """
    if column not in ("queue", "worker"):
        raise ValueError(f"no index-shaped filter for {column!r}")
    if not comparable(value):
        return Q(pk__in=[])  # no stored name holds it; Django runs no query for this
    bare = Q(**{column: value})
    if not vendor.is_postgres():
        return bare
    completed = Q(state=JobState.COMPLETED)
    if column == "worker":
        queues = distinct_values("queue", limit=QUEUE_LIST_CAP + 1)
        if len(queues) > QUEUE_LIST_CAP:
            return bare
        completed &= Q(queue__in=queues)
    return bare & (Q(state__in=LISTED_STATES) | Q(state=JobState.AVAILABLE) | completed
                   | Q(state__in=EXECUTING_STATES))


#: At most this many queues are named in a worker filter (see ``matching``).
QUEUE_LIST_CAP = 200

# PostgreSQL refuses NUL in text (DataError), and no driver encodes a lone surrogate.
_UNCOMPARABLE = re.compile("[\x00\ud800-\udfff]")


def comparable(text: str) -> bool:
    """Whether ``text`` can be sent to every database in a comparison: no NUL byte and no
    lone surrogate, which no stored text holds, so a lookup with one can only match nothing."""
    return _UNCOMPARABLE.search(text) is None


def estimated_job_count() -> int | None:
    """The planner's estimate of the number of jobs (PostgreSQL), or ``None``."""
    if not vendor.is_postgres():
        return None
    with vendor.read_connection().cursor() as cursor:
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                       [Job._meta.db_table])
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] is not None and row[0] >= 0 else None


def capped_count(queryset: Any, cap: int) -> int:
    """``min(count, cap + 1)`` without counting every row: ``COUNT(*)`` over ``LIMIT cap+1``."""
    return int(queryset.order_by()[:cap + 1].count())


def delete_jobs(ids: Iterable[uuid.UUID]) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """Delete the given jobs that are not executing, and their events.

    Returns ``(deleted, refused)``: claimed or running jobs are refused, since a
    worker is about to write their outcome.
    """
    wanted = list(ids)
    jobs = Job.objects.using(vendor.alias())  # a write: the primary, never READ_DATABASE
    with vendor.atomic():
        rows = {pk: (state, workflow_id) for pk, state, workflow_id
                in jobs.select_for_update().filter(id__in=wanted)
                .values_list("id", "state", "workflow_id")}
        # An unfinished workflow step is refused too: what waits on it would wait for ever
        # (cancel it instead; a finished one has settled already).
        refused = [pk for pk, (state, workflow_id) in rows.items()
                   if state in EXECUTING_STATES
                   or (workflow_id is not None and state not in TERMINAL_STATES)]
        deletable = [pk for pk in rows if pk not in set(refused)]
        JobEvent.objects.using(vendor.alias()).filter(job_id__in=deletable).delete()
        WorkflowStep.objects.using(vendor.alias()).filter(job_id__in=deletable).delete()
        jobs.filter(id__in=deletable).exclude(state__in=EXECUTING_STATES).delete()
    return deletable, refused


def _aware(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    return value


def _parse_time(value: Any) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        return _aware(value)
    try:
        return _aware(dt.datetime.fromisoformat(str(value)))
    except ValueError:
        return None
