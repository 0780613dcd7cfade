"""Admin page timings with a million jobs on PostgreSQL: ``main(argv)`` prints a table.

    python -c "from benchmarks.admin_pages import main; main()"          # 1,000,000 jobs
    python -c "from benchmarks.admin_pages import main; main(['--quick'])"  # 100,000 jobs

Creates (or reuses) the PostgreSQL database ``kathikon_bench_admin`` (``--quick``:
``kathikon_bench_admin_quick``), fills it server-side with ``--jobs`` jobs in a
realistic mix (mostly completed, some dead with tracebacks, retryable,
available, scheduled, cancelled; three queues, five workers, a week of UUIDv7
ids), VACUUM ANALYZEs it, logs a
superuser in with ``django.test.Client`` and times each admin page in-process
(view + template rendering = server time). The target is 300 ms for the job
list, a filtered list and a job's page. The database is kept for the next run
unless ``--drop``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from typing import Any

TARGET_MS = 300.0
TARGETED = {"queues", "overview", "job list", "job list: state=dead", "job list: queue+state",
            "job list: state=available", "job list: queue+available", "job list: queue",
            "job list: worker", "job list: state=completed", "job list: worker+completed",
            "job list: inserted range", "job list: finished range", "job list: page 20",
            "job list: search id", "job detail (dead)", "job list: dead, args key",
            "job list: dead, last error"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks.admin_pages", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100,000 jobs, 3 repeats")
    parser.add_argument("--jobs", type=int, default=None, help="default 1,000,000")
    parser.add_argument("--repeat", type=int, default=None, help="timed requests per page")
    parser.add_argument("--db-name", default=None,
                        help="default kathikon_bench_admin (kathikon_bench_admin_quick)")
    parser.add_argument("--refill", action="store_true", help="refill even if already filled")
    parser.add_argument("--drop", action="store_true", help="drop the database at the end")
    args = parser.parse_args(argv)
    jobs = args.jobs or (100_000 if args.quick else 1_000_000)
    repeat = args.repeat or (3 if args.quick else 7)

    name = args.db_name or ("kathikon_bench_admin_quick" if args.quick else "kathikon_bench_admin")
    _setup_django(name)
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    filled = _fill(jobs, refill=args.refill)
    rows = _time_pages(repeat)
    _print(rows, jobs, filled)
    if args.drop:
        _drop(name)
    return 0


# -- database ------------------------------------------------------------------------------

def _setup_django(name: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    os.environ["BENCH_DB"] = "postgres"
    os.environ["BENCH_DB_NAME"] = name
    import psycopg

    with psycopg.connect(host=os.environ.get("KATHIKON_PG_HOST", "127.0.0.1"),
                         port=int(os.environ.get("KATHIKON_PG_PORT", "5432")),
                         user=os.environ.get("KATHIKON_PG_USER", "postgres"),
                         dbname="postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    import django

    django.setup()


def _drop(name: str) -> None:
    from django.db import connections

    connections.close_all()
    import psycopg

    with psycopg.connect(host=os.environ.get("KATHIKON_PG_HOST", "127.0.0.1"),
                         user=os.environ.get("KATHIKON_PG_USER", "postgres"),
                         dbname="postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# One statement builds every row server-side. Job g is inserted g * step ms after the
# start; its id is a UUIDv7 of that millisecond (so id order = insertion order).
_FILL = """
INSERT INTO kathikon_job (id, queue, worker, args, state, priority, max_attempts, attempts,
    scheduled_at, available_at, inserted_at, started_at, completed_at, cancelled_at, errors,
    result, attempted_by, lease, meta)
SELECT
    (lpad(to_hex(ms), 12, '0') || '7' || lpad(to_hex(g %% 4096), 3, '0') || '8'
     || substr(md5(g::text), 1, 15))::uuid,
    (ARRAY['default', 'default', 'default', 'emails', 'reports'])[1 + g %% 5],
    (ARRAY['app.workers.SendEmail', 'app.workers.Resize', 'app.workers.Webhook',
           'app.workers.Report', 'app.workers.Sync'])[1 + (g / 7) %% 5],
    jsonb_build_object('user_id', g, 'email', 'user' || g || '@example.com'),
    st, (g %% 3) - 1, 20,
    CASE WHEN st IN ('available', 'scheduled') THEN 0 WHEN st = 'dead' THEN 20 ELSE 1 END,
    CASE WHEN st = 'scheduled' THEN now() + interval '1 hour' END,
    CASE WHEN st = 'scheduled' THEN now() + interval '1 hour'
         WHEN st = 'retryable' THEN at + interval '1 year' ELSE at END,
    at,
    CASE WHEN st IN ('completed', 'dead', 'retryable') THEN at + interval '1 second' END,
    CASE WHEN st IN ('completed', 'dead', 'cancelled') THEN at + interval '2 seconds' END,
    CASE WHEN st = 'cancelled' THEN at + interval '2 seconds' END,
    CASE WHEN st IN ('dead', 'retryable') THEN jsonb_build_array(jsonb_build_object(
        'attempt', 1, 'at', to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS+00:00'),
        'kind', (ARRAY['builtins.RuntimeError', 'smtplib.SMTPError', 'TimeoutError'])[1 + g %% 3],
        'message', 'failure number ' || g,
        'traceback', 'Traceback (most recent call last):' || chr(10)
                     || '  File "app/workers.py", line 12, in perform' || chr(10)
                     || 'RuntimeError: failure number ' || g))
        ELSE '[]'::jsonb END,
    CASE WHEN st = 'completed' THEN '{"ok": true}'::jsonb END,
    CASE WHEN st IN ('completed', 'dead', 'retryable') THEN 'bench-host:1' ELSE '' END,
    g, '{}'::jsonb
FROM (
    SELECT g, start_ms + g * step_ms AS ms,
           to_timestamp((start_ms + g * step_ms) / 1000.0) AS at,
           CASE WHEN g %% 100 < 88 THEN 'completed' WHEN g %% 100 < 91 THEN 'dead'
                WHEN g %% 100 < 93 THEN 'retryable' WHEN g %% 100 < 97 THEN 'available'
                WHEN g %% 100 < 98 THEN 'scheduled' ELSE 'cancelled' END AS st
    FROM generate_series(1, %(n)s) AS g,
         (SELECT (extract(epoch FROM now() - interval '7 days') * 1000)::bigint AS start_ms,
                 (7 * 86400 * 1000 / %(n)s)::bigint AS step_ms) AS p
) AS s
"""


def _fill(n: int, *, refill: bool) -> bool:
    """Make sure the table holds ``n`` jobs; returns whether it was (re)filled now."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM kathikon_job")
        if cursor.fetchone()[0] == n and not refill:
            return False
        sys.stderr.write(f"[admin] filling kathikon_job with {n:,} jobs …\n")
        started = time.monotonic()
        cursor.execute("TRUNCATE kathikon_job, kathikon_jobevent, kathikon_queue")
        # Bulk-load speed (10M rows in minutes): the secondary indexes are dropped and built
        # once afterwards, and this bench-only session does not wait for WAL flushes.
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = "
                       "'kathikon_job' AND indexname NOT IN (SELECT conname FROM pg_constraint "
                       "WHERE conrelid = 'kathikon_job'::regclass)")
        indexes = cursor.fetchall()
        cursor.execute("SET synchronous_commit = off")
        cursor.execute("SET maintenance_work_mem = '256MB'")
        for name, _ in indexes:
            cursor.execute(f'DROP INDEX "{name}"')
        cursor.execute(_FILL, {"n": n})
        for name, definition in indexes:
            sys.stderr.write(f"[admin] index {name} ({time.monotonic() - started:.0f} s)\n")
            cursor.execute(definition)
    connection.close()
    with connection.cursor() as cursor:  # VACUUM must run outside a transaction block
        cursor.execute("VACUUM ANALYZE kathikon_job")
    sys.stderr.write(f"[admin] filled in {time.monotonic() - started:.0f} s\n")
    return True


# -- timing --------------------------------------------------------------------------------

def _pages() -> list[tuple[str, str]]:
    from django.urls import reverse

    from kathikon.models import Job

    jobs = reverse("admin:kathikon_job_changelist")
    dead, dead_args = Job.objects.filter(state="dead").order_by("-id").values_list(
        "pk", "args")[0]
    user_id = dead_args.get("user_id")
    now = dt.datetime.now(dt.timezone.utc)
    day = (now - dt.timedelta(days=3)).date().isoformat()
    old = (now - dt.timedelta(days=6)).date().isoformat()
    return [
        ("job list", jobs),
        ("job list: state=dead", f"{jobs}?state=dead"),
        ("job list: queue+state", f"{jobs}?queue=emails&state=retryable"),
        ("job list: worker", f"{jobs}?worker=app.workers.Webhook"),
        # Available jobs are in the claim index, not the (state, id) ones, on PostgreSQL.
        ("job list: state=available", f"{jobs}?state=available"),
        ("job list: queue+available", f"{jobs}?queue=emails&state=available"),
        ("job list: queue", f"{jobs}?queue=emails"),
        # Completed and running jobs are outside the (state, id) indexes on PostgreSQL.
        ("job list: state=completed", f"{jobs}?state=completed"),
        ("job list: worker+completed", f"{jobs}?worker=app.workers.Webhook&state=completed"),
        ("job list: inserted range", f"{jobs}?inserted_at__range__gte={day}"
                                     f"&inserted_at__range__lte={day}"),
        ("job list: finished range", f"{jobs}?completed_at__range__gte={old}"
                                     f"&completed_at__range__lte={old}&state=dead"),
        ("job list: page 20", f"{jobs}?p=20"),
        ("job list: search id", f"{jobs}?q={dead.hex}"),
        # structured search (kathikon.storage.search): the GIN index over failed jobs' args
        ("job list: dead, args key", f"{jobs}?state=dead&q=args.user_id%3D{user_id}"),
        ("job list: dead, last error", f"{jobs}?state=dead&q=error%3Afailure+number+{user_id}"),
        ("job detail (dead)", reverse("admin:kathikon_job_change", args=[dead])),
        ("queues", reverse("admin:kathikon_queue_changelist")),
        ("overview", reverse("admin:app_list", args=["kathikon"])),
    ]


def _time_pages(repeat: int) -> list[dict[str, Any]]:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, setup_test_environment

    setup_test_environment()
    user = User.objects.filter(username="bench-admin").first() or User.objects.create_superuser(
        "bench-admin", "bench@example.com", None)
    client = Client()
    client.force_login(user)
    rows = []
    for name, url in _pages():
        response = client.get(url)  # warm-up: caches, plans
        timings = []
        for _ in range(repeat):
            started = time.perf_counter()
            with CaptureQueriesContext(connection) as queries:
                response = client.get(url)
            timings.append((time.perf_counter() - started) * 1000)
        rows.append({"page": name, "status": response.status_code,
                     "median": statistics.median(timings), "max": max(timings),
                     "queries": len(queries), "url": url})
    return rows


def _print(rows: list[dict[str, Any]], jobs: int, filled: bool) -> None:
    print(f"Admin pages with {jobs:,} jobs on PostgreSQL (server time: view + template; "
          f"target {TARGET_MS:.0f} ms){' — table freshly filled' if filled else ''}")
    header = f"{'page':<26} {'status':>6} {'median ms':>10} {'max ms':>8} {'queries':>8}  target"
    print(header)
    print("-" * len(header))
    for row in rows:
        verdict = ""
        if row["page"] in TARGETED:
            verdict = "ok" if row["median"] < TARGET_MS else "SLOW"
        print(f"{row['page']:<26} {row['status']:>6} {row['median']:>10.1f} {row['max']:>8.1f} "
              f"{row['queries']:>8}  {verdict}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
