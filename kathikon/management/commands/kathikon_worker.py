"""``manage.py kathikon_worker``: run Kathikon's dispatchers and services until stopped.

    manage.py kathikon_worker                         # every configured queue
    manage.py kathikon_worker --queues emails:5,default
    manage.py kathikon_worker --processes 4           # a supervisor and 4 worker processes
    manage.py kathikon_worker --burst                 # run what is due, then exit 0
    manage.py kathikon_worker --database shard2       # only the queues of one database

See docs/running-workers.md.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kathikon.conf import MAX_CONCURRENCY, QUEUE_NAME


class Command(BaseCommand):
    help = "Run Kathikon workers: claim and run jobs until SIGTERM/SIGINT (or, with --burst, " \
           "until nothing is due)."
    requires_system_checks = "__all__"  # type: ignore[assignment]

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queues", default=None, metavar="NAME[:N],...",
            help="Only these queues, optionally with a concurrency each, e.g. "
                 "'emails:5,default'. Default: every configured queue plus queues started "
                 "later with kathikon.start_queue().")
        parser.add_argument(
            "--burst", action="store_true",
            help="Run every job that is due (including retries coming due meanwhile) until "
                 "none is due and none is running, then exit 0.")
        parser.add_argument("--processes", type=int, default=1, metavar="N",
                            help="Fork N worker processes under a supervisor (default 1).")
        parser.add_argument(
            "--database", default=None, metavar="ALIAS",
            help="Only the queues that live in this database (KATHIKON['QUEUES'][name]"
                 "['database'], else KATHIKON['DATABASE']). Default: every database that "
                 "holds queues, each in processes of its own.")
        parser.add_argument("--node", default=None, metavar="NAME",
                            help="Node name (default host:pid; with --processes, NAME-1..N).")
        parser.add_argument(
            "--metrics-port", type=int, default=None, metavar="PORT",
            help="Serve Prometheus metrics of this worker's jobs on PORT (needs "
                 "kathikon[prometheus]); with --processes N, node i listens on PORT+i-1.")

    def handle(self, *args: Any, **options: Any) -> None:
        from kathikon.runtime.supervisor import Supervisor
        from kathikon.runtime.worker import WorkerProcess
        from kathikon.storage import vendor

        queues = parse_queues(options["queues"])
        processes = options["processes"]
        if processes < 1:
            raise CommandError("--processes must be at least 1")
        served = split_by_database(queues, options["database"])
        total = processes * len(served)  # each database in processes of its own
        node, burst = options["node"], options["burst"]
        if node:
            check_node(node if total == 1 else f"{node}-{total}")
        metrics_port = options["metrics_port"]
        if metrics_port is not None:
            check_metrics_port(metrics_port, total)
        _configure_logging(options["verbosity"])
        databases = list(served)

        def make_worker(index: int, parent_pid: int | None) -> WorkerProcess:
            database = databases[index // processes]
            vendor.serve(database)  # this process's claims, lifeline, promoter, pruner, LISTEN
            name = node if node is None or total == 1 else f"{node}-{index + 1}"
            if metrics_port is not None:
                from kathikon.metrics import serve

                serve(metrics_port + index)
            return WorkerProcess(node=name, queues=served[database], burst=burst,
                                 parent_pid=parent_pid, write=self._writer(options["verbosity"]))

        code = Supervisor(total, make_worker, burst=burst).run()
        if code:
            sys.exit(code)

    def _writer(self, verbosity: int) -> Any:
        def write(line: str) -> None:
            if verbosity >= 1:
                self.stdout.write(line)
                self.stdout.flush()

        return write


def parse_queues(value: str | None) -> dict[str, int | None] | None:
    """``"emails:5,default"`` → ``{"emails": 5, "default": None}``."""
    if value is None:
        return None
    queues: dict[str, int | None] = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        name, _, number = part.partition(":")
        if not QUEUE_NAME.match(name):
            raise CommandError(f"--queues: bad queue name {name!r}")
        if number:
            if not number.isdigit() or not 1 <= int(number) <= MAX_CONCURRENCY:
                raise CommandError(f"--queues: concurrency of {name!r} must be an int from 1 "
                                   f"to {MAX_CONCURRENCY}")
            queues[name] = int(number)
        else:
            queues[name] = None
    if not queues:
        raise CommandError("--queues needs at least one queue name")
    return queues


def split_by_database(queues: dict[str, int | None] | None,
                      database: str | None) -> dict[str, dict[str, int | None] | None]:
    """Database alias → the ``--queues`` it serves (None: all of its queues).

    Every database that holds queues gets processes of its own (docs/scaling.md);
    ``--database`` keeps one. ``CommandError`` for an unknown alias, or a queue of
    ``--queues`` that lives in another database than ``--database``.
    """
    from django.conf import settings

    from kathikon import conf

    if database is not None and database not in settings.DATABASES:
        raise CommandError(f"--database: no database {database!r} in DATABASES (known: "
                           f"{', '.join(settings.DATABASES)})")
    if queues is None:
        return {database: None} if database else dict.fromkeys(conf.databases())
    split: dict[str, dict[str, int | None]] = {}
    for name, concurrency in queues.items():
        home = conf.queue_database(name)
        if database is not None and home != database:
            raise CommandError(f"--queues: the queue {name!r} lives in the database {home!r}, "
                               f"not {database!r}")
        split.setdefault(home, {})[name] = concurrency
    return {alias: chosen for alias, chosen in split.items()}


def check_metrics_port(port: int, processes: int) -> None:
    """``CommandError`` before start-up for a port range that cannot be, or no exporter."""
    if port < 1 or port + processes - 1 > 65535:
        raise CommandError(f"--metrics-port: {port} … {port + processes - 1} is not a range "
                           "of TCP ports (1 to 65535)")
    try:
        import kathikon.metrics  # noqa: F401
    except ImportError as missing:
        raise CommandError(f"--metrics-port: {missing}") from None


def check_node(name: str) -> None:
    """``CommandError`` for a node name the node table cannot store (the longest one given).

    Refused before start-up: the worker would otherwise retry its registration forever as
    if the database were down.
    """
    from kathikon.models import Node

    longest = Node._meta.get_field("name").max_length
    if longest is not None and len(name) > longest:
        raise CommandError(f"--node: the node name {name[:40]!r}… is {len(name)} characters "
                           f"long (with --processes, the suffix '-N' included); at most "
                           f"{longest} are stored")
    if not name.isprintable():
        raise CommandError(f"--node: the node name {name!r} holds a control character, NUL "
                           "or a byte that is not UTF-8; use printable characters")


def _configure_logging(verbosity: int) -> None:
    """``-v 0`` warnings only, ``1`` (default) info, ``2``/``3`` debug."""
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    for name in ("kathikon", "kathikon.runtime"):
        logging.getLogger(name).setLevel(level)
    root = logging.getLogger("kathikon")
    if not root.hasHandlers():  # the project configured nothing for us: log to stderr
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        root.addHandler(handler)
