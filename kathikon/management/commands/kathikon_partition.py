"""``manage.py kathikon_partition``: keep finished jobs in day partitions (PostgreSQL).

``enable`` partitions the job table (one locked pass over it), ``status``
lists the partitions (a table, or ``--json``), ``maintain`` creates the days
ahead and drops the expired ones now (every worker's pruner does it on its own),
``disable`` puts the plain table back. See docs/partitioning.md.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kathikon import conf
from kathikon.management.cells import size, table_lines
from kathikon.storage import partitions, vendor


class Command(BaseCommand):
    help = "Keep finished jobs in day partitions on PostgreSQL (enable, status, maintain, disable)."

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="action", metavar="COMMAND", required=True)
        parser.add_argument("--database", metavar="ALIAS",
                            help="The database (default: KATHIKON['DATABASE']).")
        enable = commands.add_parser(
            "enable", help="Partition the job table (locks it for one pass over its rows).")
        enable.add_argument("--ahead", type=int, default=3, help="Days made ahead (default 3).")
        enable.add_argument("--lock-timeout", type=float, default=10.0,
                            help="Seconds to wait for the table's lock (default 10).")
        status = commands.add_parser("status", help="The partitions, their rows and size.")
        status.add_argument("--json", action="store_true", help="Print JSON for scripts.")
        commands.add_parser("maintain", help="Create the days ahead and drop the expired now.")
        disable = commands.add_parser("disable", help="Put the plain job table back.")
        disable.add_argument("--drop-history", action="store_true",
                             help="Drop the finished jobs of the day partitions instead of "
                                  "copying them back.")
        disable.add_argument("--lock-timeout", type=float, default=10.0)

    def handle(self, *args: Any, **options: Any) -> None:
        database = options["database"] or conf.database()
        with vendor.using(database):
            if not vendor.is_postgres():
                raise CommandError("partitioning needs PostgreSQL: MariaDB and SQLite keep the "
                                   "plain job table (docs/partitioning.md)")
            try:
                getattr(self, "do_" + options["action"])(options)
            except partitions.PartitioningError as exc:
                raise CommandError(str(exc)) from exc

    def do_enable(self, options: dict[str, Any]) -> None:
        self.stdout.write("Partitioning the job table (it is locked until this is done)…")
        done = partitions.enable(ahead=options["ahead"], lock_timeout=options["lock_timeout"])
        self.stdout.write(f"Done: the table was locked for {done.locked_seconds:.2f} s; "
                          f"{done.live_rows} live jobs moved, {done.legacy_rows} finished "
                          f"jobs kept in {partitions.LEGACY}.")
        self.stdout.write("Created: " + ", ".join(done.created))

    def do_status(self, options: dict[str, Any]) -> None:
        found = partitions.partitions()
        if options["json"]:
            listed = [{**asdict(p), "lower": _iso(p.lower), "upper": _iso(p.upper)}
                      for p in found]
            self.stdout.write(json.dumps({"partitioned": bool(found), "partitions": listed}))
            return
        if not found:
            self.stdout.write("The job table is not partitioned.")
            return
        rows = [[p.name, p.kind, _iso(p.lower), _iso(p.upper), f"{p.rows:,}", size(p.bytes)]
                for p in found]
        for line in table_lines(["PARTITION", "KIND", "FROM", "TO", "ROWS (EST.)", "SIZE"],
                                rows):
            self.stdout.write(line)

    def do_maintain(self, options: dict[str, Any]) -> None:
        done = partitions.maintain(now=vendor.db_now(),
                                   retention=dt.timedelta(seconds=conf.retention_period()))
        self.stdout.write(f"Created: {', '.join(done.created) or 'none'}; "
                          f"dropped: {', '.join(done.dropped) or 'none'}"
                          + (f"; busy, next time: {', '.join(done.skipped)}"
                             if done.skipped else ""))

    def do_disable(self, options: dict[str, Any]) -> None:
        keep = not options["drop_history"]

        def progress(name: str, rows: int) -> None:
            self.stdout.write(f"  {name} {'copied' if keep else 'dropped'} ({rows:,} jobs so far)")

        done = partitions.disable(keep_history=keep, lock_timeout=options["lock_timeout"],
                                  progress=progress)
        self.stdout.write(f"Done: the table was locked for {done.locked_seconds:.2f} s; "
                          f"{done.copied} finished jobs copied back, {done.dropped} dropped.")


def _iso(day: dt.date | None) -> str | None:
    return day.isoformat() if day else None

