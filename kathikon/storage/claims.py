"""Internal: claiming jobs — the start of claim → run → ack.

A claim takes up to ``limit`` due jobs of one queue (best priority, then oldest)
in one short statement, bumps each job's ``attempts`` and ``lease`` (the fencing
token every later write must present) and records the claiming node. Jobs of
a paused queue are never claimed. Crash suspects (``suspect``) are left to
``storage.quarantine``, which claims them one at a time into an empty process.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db.models import F

from kathikon.exceptions import InvalidState, JobExecuting, JobNotFound
from kathikon.ids import parse_id
from kathikon.models import Job, Queue
from kathikon.states import CLAIMABLE_STATES, EXECUTING_STATES, JobState
from kathikon.storage import prepared, vendor
from kathikon.storage.fragments import CLAIMABLE_SQL
from kathikon.storage.partitions import on_live
from kathikon.storage.rows import JOB_COLUMNS, JOB_COLUMNS_MYSQL, fetch_jobs, jobs_from_rows
from kathikon.storage.uniques import key_after, key_after_sql
from kathikon.unique import holds

# The picked ids go to the UPDATE as an array (``= ANY(ARRAY(…))``): the planner then
# always fetches them by primary key. The claim is a prepared statement
# (``storage.prepared``); joining a CTE instead, PostgreSQL's generic plan guesses that
# ``LIMIT $n`` keeps 10% of the queue and, past ~100k waiting jobs, joins by
# scanning the whole table (320 ms instead of 1 ms for 10 jobs of 157k).
_PG_CLAIM = f"""
UPDATE kathikon_job AS j
SET state = %(into)s, attempts = j.attempts + 1, started_at = {{now}},
    attempted_by = %(node)s, lease = j.lease + 1, unique_key = {{key}}
WHERE j.id = ANY(ARRAY(
    SELECT id FROM kathikon_job
    WHERE queue = %(queue)s AND state IN ({CLAIMABLE_SQL}) AND available_at <= {{now}}
      AND NOT suspect /*live*/
      AND NOT EXISTS (SELECT 1 FROM kathikon_queue WHERE name = %(queue)s AND paused)
    ORDER BY priority DESC, available_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)) /*live:j*/
RETURNING {", ".join("j." + c.strip('"') for c in JOB_COLUMNS.split(", "))}
"""

# SQLite has one writer: the UPDATE is atomic on its own, no row locks needed.
_SQLITE_CLAIM_SQL = """
UPDATE kathikon_job
SET state = %s, attempts = attempts + 1, started_at = %s, attempted_by = %s, lease = lease + 1,
    unique_key = {key}
WHERE id IN (
    SELECT id FROM kathikon_job
    WHERE queue = %s AND state IN ({claimable}) AND +available_at <= %s
      AND NOT suspect
      AND NOT EXISTS (SELECT 1 FROM kathikon_queue WHERE name = %s AND paused)
    ORDER BY priority DESC, available_at
    LIMIT %s)
RETURNING id
"""
_SQLITE_CLAIMS: dict[str, str] = {
    into: _SQLITE_CLAIM_SQL.format(key=key_after_sql(into), claimable=CLAIMABLE_SQL)
    for into in EXECUTING_STATES}
_SQLITE_CLAIM = _SQLITE_CLAIMS[JobState.RUNNING]


def claim_jobs(queue: str, limit: int, node: str, *, into: str = JobState.RUNNING,
               now: dt.datetime | None = None) -> list[Job]:
    """Claim up to ``limit`` due jobs of ``queue`` for ``node``; they come back in ``into``."""
    if limit <= 0:
        return []
    if into not in EXECUTING_STATES:
        raise ValueError(f"claim into {into!r}: must be claimed or running")
    kind = vendor.vendor()
    if kind == "postgresql":
        jobs = _claim_postgres(queue, limit, node, into, now)
    elif kind == "sqlite":
        jobs = _claim_sqlite(queue, limit, node, into, now or vendor.now())
    else:
        jobs = _claim_locking(queue, limit, node, into, now or vendor.now())
    jobs.sort(key=lambda job: (-job.priority, job.available_at))
    return jobs


def _claim_postgres(queue: str, limit: int, node: str, into: str,
                    now: dt.datetime | None) -> list[Job]:
    sql = on_live(_PG_CLAIM.format(now="%(now)s" if now else "statement_timestamp()",
                                   key=key_after_sql(into, "j")))
    params: dict[str, Any] = {
        "queue": queue, "limit": limit, "node": node, "into": into, "now": now}
    with prepared.cursor() as cursor:
        return fetch_jobs(cursor, sql, params)


def _claim_sqlite(queue: str, limit: int, node: str, into: str, now: dt.datetime) -> list[Job]:
    connection = vendor.connection()
    stamp = connection.ops.adapt_datetimefield_value(now)
    with vendor.atomic(), connection.cursor() as cursor:
        cursor.execute(_SQLITE_CLAIMS[into], [into, stamp, node, queue, stamp, queue, limit])
        ids = [row[0] for row in cursor.fetchall()]
        if not ids:
            return []
        return list(Job.objects.using(vendor.alias()).filter(id__in=ids).order_by())


# MariaDB/MySQL have no partial index: kathikon_job_claim is (queue, state, priority DESC,
# available_at) there. One locking, ordered range scan per claimable state stops at the limit
# and never walks finished jobs; the union's best ``limit`` rows are claimed (the extra rows
# locked by the other branch are released at commit).
_MYSQL_CLAIM_BRANCH = f"""
(SELECT {JOB_COLUMNS_MYSQL} FROM kathikon_job FORCE INDEX (kathikon_job_claim)
 WHERE queue = %s AND state = %s AND available_at <= %s AND NOT suspect
 ORDER BY priority DESC, available_at LIMIT %s FOR UPDATE SKIP LOCKED)"""
_MYSQL_CLAIM = (" UNION ALL ".join([_MYSQL_CLAIM_BRANCH] * len(CLAIMABLE_STATES))
                + " ORDER BY priority DESC, available_at LIMIT %s")


def _claim_locking(queue: str, limit: int, node: str, into: str, now: dt.datetime) -> list[Job]:
    """MariaDB/MySQL: one ``SELECT … FOR UPDATE SKIP LOCKED`` per state, then one UPDATE."""
    using = vendor.alias()
    connection = vendor.connection()
    if Queue.objects.using(using).filter(name=queue, paused=True).exists():
        return []
    stamp = connection.ops.adapt_datetimefield_value(now)
    params: list[Any] = []
    for state in CLAIMABLE_STATES:
        params += [queue, state, stamp, limit]
    params.append(limit)
    with vendor.atomic():
        with connection.cursor() as cursor:
            cursor.execute(_MYSQL_CLAIM, params)
            jobs = jobs_from_rows(cursor.fetchall(), using)
        if not jobs:
            return []
        Job.objects.using(using).filter(id__in=[job.id for job in jobs]).update(
            state=into, attempts=F("attempts") + 1, started_at=now, attempted_by=node,
            lease=F("lease") + 1, unique_key=key_after(into))
    for job in jobs:  # the rows were locked, so these are exactly the values written
        job.state, job.started_at, job.attempted_by = into, now, node
        job.attempts += 1
        job.lease += 1
        if not holds(job.unique_states, into):
            job.unique_key = None
    return jobs


def claim_job(job_id: object, node: str, *, now: dt.datetime | None = None) -> Job:
    """Claim one specific job (external runners): it must be available or retryable and due."""
    pk = parse_id(job_id)
    if pk is None:
        raise JobNotFound(f"no job with id {job_id!r}")
    using = vendor.alias()
    now = now or vendor.now()
    with vendor.atomic():
        job = Job.objects.using(using).select_for_update().filter(pk=pk).first()
        if job is None:
            raise JobNotFound(f"no job with id {pk.hex}")
        if job.state in EXECUTING_STATES:
            raise JobExecuting(f"job {pk.hex} is {job.state}")
        if not job.is_claimable(now):
            raise InvalidState(f"job {pk.hex} is {job.state} and not claimable now",
                               state=job.state)
        job.state, job.started_at, job.attempted_by = JobState.CLAIMED, now, node
        job.attempts += 1
        job.lease += 1
        if not holds(job.unique_states, JobState.CLAIMED):
            job.unique_key = None
        job.save(update_fields=["state", "started_at", "attempted_by", "attempts", "lease",
                                "unique_key"])
    return job


def start_job(job: Job) -> bool:
    """``claimed → running`` for a job claimed with ``claim()``; False if fenced off."""
    updated = Job.objects.using(vendor.alias()).filter(
        id=job.id, lease=job.lease, state=JobState.CLAIMED).update(
            state=JobState.RUNNING, unique_key=key_after(JobState.RUNNING))
    if updated:
        job.state = JobState.RUNNING
        if not holds(job.unique_states, JobState.RUNNING):
            job.unique_key = None
    return bool(updated)
