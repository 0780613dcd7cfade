"""``manage.py kathikon_ops``: inspect and steer jobs, queues and workflows from a shell.

A thin shell over ``kathikon.dashboard``, ``kathikon.report`` and
``kathikon.workflows``: tables for people, ``--json`` for scripts, a non-zero
exit and a clear message for unknown ids, states or queue names. See
docs/operations.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kathikon import conf, dashboard, known_queues, report, workflows
from kathikon.exceptions import ActionNotAllowed, InvalidWorkflow, KathikonError, NotMigrated
from kathikon.management import workflow_views as views
from kathikon.management.cells import age, clip, table_lines, when
from kathikon.models import Workflow
from kathikon.states import JobState
from kathikon.storable import MAX_INT
from kathikon.storage.schema import explain_missing_schema
from kathikon.workflows.graph import check_workflow_name

DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw]?)$")
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration(text: str) -> float:
    """Seconds from ``3600``, ``90s``, ``30m``, ``12h``, ``7d`` or ``2w``."""
    match = DURATION.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"bad duration {text!r}: use e.g. 3600, 30m, 12h or 7d")
    return float(match.group(1)) * UNITS[match.group(2)]


class Command(BaseCommand):
    help = ("Inspect and steer Kathikon jobs, queues and workflows (summary, jobs, failures, "
            "retry, workflows, …).")

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="action", metavar="COMMAND", required=True)

        def sub(name: str, text: str) -> Any:
            command = commands.add_parser(name, help=text, description=text)
            command.add_argument("--json", action="store_true", help="Print JSON for scripts.")
            return command

        sub("summary", "Queues: paused, concurrency, jobs per state, oldest waiting, throughput.")
        jobs = sub("jobs", "List jobs, newest first (keyset-paginated with --cursor).")
        jobs.add_argument("--queue")
        jobs.add_argument("--state", choices=JobState.values)
        jobs.add_argument("--worker", help="The worker's dotted path.")
        jobs.add_argument("--limit", type=int, default=50)
        jobs.add_argument("--cursor", help="The 'next cursor' printed by the previous page.")
        jobs.add_argument("--database", metavar="ALIAS",
                          help="The database to list (queues on several databases: "
                               "docs/scaling.md). Default: --queue's, else KATHIKON['DATABASE'].")
        failures = sub("failures", "Failures by worker and error kind.")
        failures.add_argument("--window", type=duration, default=86400,
                              help="How far back to look (default 1d; e.g. 30m, 12h, 7d).")
        failures.add_argument("--limit", type=count, default=100)
        sub("show", "One job with its errors and history.").add_argument("id")
        listed = sub("workflows", "List workflows, newest first, with their steps' states.")
        listed.add_argument("--status", choices=Workflow.Status.values)
        listed.add_argument("--name", type=workflow_name, help="The workflow's name, exactly.")
        listed.add_argument("--limit", type=page_size, default=50)
        sub("workflow", "One workflow: its fields, its steps' states and each step."
            ).add_argument("id")
        for name, text in (("retry", "Put jobs back to available now."),
                           ("cancel", "Cancel pending jobs."),
                           ("rerun", "Enqueue copies of finished jobs.")):
            sub(name, text).add_argument("ids", nargs="+", metavar="ID")
        sub("workflow-cancel", "Cancel every step of a workflow (and its sub-workflows) that "
            "has not started; running steps finish.").add_argument("id")
        sub("release", "Run a held workflow step now, though a dependency failed."
            ).add_argument("id", metavar="JOB_ID")
        for name in ("pause", "resume"):
            command = sub(name, f"{name.capitalize()} a queue, or every queue with --all.")
            command.add_argument("queue", nargs="?")
            command.add_argument("--all", action="store_true", dest="all_queues")
            create_option(command)
        limits = sub("limits", "Change a queue's global_limit, partition and rate_limit on "
                     "every node ('none' = unlimited); prints the effective limits.")
        limits.add_argument("queue")
        limits.add_argument("--global-limit", type=optional_int, metavar="N|none")
        limits.add_argument("--partition", type=partition_option, metavar="BY:LIMIT|none",
                            help="e.g. args.account_id:1 or worker:2")
        limits.add_argument("--rate", type=rate_option, metavar="N/SECONDS|none",
                            help="e.g. 60/60: at most 60 starts a minute")
        limits.add_argument("--reset", action="store_true",
                            help="Drop the run-time overrides first (back to the settings).")
        create_option(limits)
        prune = sub("prune", "Delete finished jobs older than the retention period.")
        prune.add_argument("--older-than", type=duration, default=None,
                           help="Default: KATHIKON['RETENTION_PERIOD']. Shorter than that "
                                "needs --yes.")
        prune.add_argument("--yes", action="store_true",
                           help="Confirm a prune that deletes jobs younger than the retention "
                                "period (e.g. --older-than 0: every finished job).")

    def handle(self, *args: Any, **options: Any) -> None:
        handler: Callable[[dict[str, Any]], Any] = getattr(
            self, f"do_{options['action'].replace('-', '_')}")
        try:
            with explain_missing_schema():  # "run migrate", not a raw ProgrammingError
                handler(options)
        except NotMigrated as exc:
            raise CommandError(str(exc), returncode=NotMigrated.exit_code) from exc
        except (KathikonError, ValueError) as exc:
            raise CommandError(str(exc)) from exc

    # -- reads ---------------------------------------------------------------------------------

    def do_summary(self, options: dict[str, Any]) -> None:
        summaries = dashboard.queue_summary()
        if options["json"]:
            return self.emit([summary.as_dict() for summary in summaries])
        rows = [[s.name, s.status, s.concurrency,
                 s.counts["available"], s.counts["scheduled"],
                 f"{s.counts['waiting']}/{s.counts['held']}",
                 s.counts["claimed"] + s.counts["running"], s.counts["retryable"],
                 s.counts["dead"], s.counts["completed"], s.counts["cancelled"],
                 age(s.oldest_available_age), f"{s.completed_last_minute}/{s.completed_last_hour}",
                 f"{s.failed_last_minute}/{s.failed_last_hour}", s.limits_text or None]
                for s in summaries]
        headers = ["QUEUE", "STATUS", "CONC", "AVAILABLE", "SCHEDULED", "WAIT/HELD", "EXECUTING",
                   "RETRYABLE", "DEAD", "COMPLETED", "CANCELLED", "OLDEST",
                   "DONE 1m/1h", "FAILED 1m/1h", "LIMITS"]
        if len(conf.databases()) > 1:  # queues on several databases: say which holds each
            headers.insert(1, "DATABASE")
            rows = [[row[0], s.database, *row[1:]] for row, s in zip(rows, summaries, strict=True)]
        self.table(headers, rows)
        for s in summaries:
            waiting = s.counts["available"] + s.counts["scheduled"] + s.counts["retryable"]
            if s.status == "unserved" and waiting:
                self.stdout.write(f"queue {s.name}: not served by any live worker ({waiting} "
                                  "job(s) waiting); start one: manage.py kathikon_worker "
                                  f"--queues {s.name}, or add it to KATHIKON['QUEUES']")

    def do_jobs(self, options: dict[str, Any]) -> None:
        page = dashboard.list_jobs(queue=options["queue"], state=options["state"],
                                   worker=options["worker"], limit=options["limit"],
                                   cursor=options["cursor"], database=options["database"])
        if options["json"]:
            return self.emit({"jobs": [dashboard.job_as_dict(job) for job in page.jobs],
                              "next_cursor": page.next_cursor})
        rows = [[job.id.hex, job.shown_worker, job.queue, job.state, job.priority,
                 f"{job.attempts}/{job.max_attempts}", when(job.inserted_at),
                 when(job.completed_at)] for job in page.jobs]
        self.table(["ID", "WORKER", "QUEUE", "STATE", "PRI", "ATTEMPTS", "INSERTED",
                    "FINISHED"], rows)
        if page.next_cursor:
            self.stdout.write(f"next page: --cursor {page.next_cursor}")

    def do_failures(self, options: dict[str, Any]) -> None:
        failures = report.failure_summary(window=options["window"], limit=options["limit"])
        if options["json"]:
            return self.emit([failure.as_dict() for failure in failures])
        rows = [[f.worker, f.kind, f.count, when(f.last_seen), clip(f.sample_message, 60)]
                for f in failures]
        self.table(["WORKER", "KIND", "COUNT", "LAST SEEN", "SAMPLE MESSAGE"], rows)

    def do_show(self, options: dict[str, Any]) -> None:
        detail = dashboard.fetch_job(options["id"])
        if options["json"]:
            return self.emit({"job": dashboard.job_as_dict(detail.job),
                              "history": detail.history})
        data = dashboard.job_as_dict(detail.job)
        errors = data.pop("errors")
        width = max(len(name) for name in data)
        for name, value in data.items():
            shown = json.dumps(value) if isinstance(value, (dict, list)) else value
            self.stdout.write(f"{name.ljust(width)}  {'-' if shown in (None, '') else shown}")
        self.stdout.write("\nhistory:")
        self.table(["AT", "EVENT", "DETAILS"], [
            [when(item["at"]), item["event"], clip(", ".join(
                f"{key}={value}" for key, value in item.items()
                if key not in ("at", "event") and value not in (None, "")), 80)]
            for item in detail.history])
        for error in errors:
            self.stdout.write(f"\nerror (attempt {error.get('attempt')}, {error.get('at')}): "
                              f"{error.get('kind')}: {error.get('message')}")
            self.stdout.write(str(error.get("traceback") or "").rstrip())

    def do_workflows(self, options: dict[str, Any]) -> None:
        found = workflows.list_workflows(status=options["status"], name=options["name"],
                                         limit=options["limit"])
        if options["json"]:
            return self.emit({"workflows": [views.workflow_dict(info, listed=True)
                                            for info in found]})
        self.table(views.LIST_HEADERS, [views.list_row(info) for info in found])

    def do_workflow(self, options: dict[str, Any]) -> None:
        info = workflows.fetch(options["id"])
        if options["json"]:
            return self.emit({"workflow": views.workflow_dict(info),
                              "steps": [asdict(step) for step in info.steps]})
        fields = views.fields(info)
        width = max(len(name) for name, _ in fields)
        for name, value in fields:
            self.stdout.write(f"{name.ljust(width)}  {value or '-'}")
        self.stdout.write("\nsteps:")
        self.table(views.STEP_HEADERS, [views.step_row(step) for step in info.steps])
        for hint in views.hints(info):
            self.stdout.write(hint)

    # -- changes -------------------------------------------------------------------------------

    def do_retry(self, options: dict[str, Any]) -> None:
        self.bulk(options, dashboard.retry_jobs, "retried")

    def do_cancel(self, options: dict[str, Any]) -> None:
        self.bulk(options, dashboard.cancel_jobs, "cancelled")

    def do_rerun(self, options: dict[str, Any]) -> None:
        self.bulk(options, dashboard.rerun_jobs, "rerun as")

    def do_workflow_cancel(self, options: dict[str, Any]) -> None:
        require_destructive("cancelling a workflow")
        info = workflows.cancel(options["id"], actor=ACTOR)
        if options["json"]:
            return self.emit({"workflow": views.workflow_dict(info)})
        self.stdout.write(f"cancelled workflow {info.id} ({info.name}): "
                          f"{views.status_text(info)}; steps: "
                          f"{views.counts_text(info.counts) or 'none'}")

    def do_release(self, options: dict[str, Any]) -> None:
        require_destructive("releasing a held step")
        job = workflows.release(options["id"], actor=ACTOR)
        if options["json"]:
            return self.emit({"released": job.id.hex, "state": job.state})
        self.stdout.write(f"released {job.id.hex} (step {job.step}): {job.state}")

    def do_pause(self, options: dict[str, Any]) -> None:
        self.pause(options, paused=True)

    def do_resume(self, options: dict[str, Any]) -> None:
        self.pause(options, paused=False)

    def do_limits(self, options: dict[str, Any]) -> None:
        self.require_known(options)
        given = {key: options[option] for key, option in (
            ("global_limit", "global_limit"), ("partition", "partition"), ("rate_limit", "rate"))
            if options[option] is not None}
        effective = dashboard.set_queue_limits(
            options["queue"], reset=options["reset"],
            **{key: (None if value == NONE else value) for key, value in given.items()})
        if options["json"]:
            return self.emit({"queue": options["queue"], "limits": effective})
        self.stdout.write(f"{options['queue']}: " + ", ".join(
            f"{key}={json.dumps(value)}" for key, value in effective.items()))

    def do_prune(self, options: dict[str, Any]) -> None:
        older_than, retention = options["older_than"], conf.retention_period()
        if older_than is not None and older_than < retention and not options["yes"]:
            raise CommandError(
                f"--older-than {older_than:g}s is shorter than the retention period "
                f"(KATHIKON['RETENTION_PERIOD'] = {retention:g}s): it deletes finished jobs "
                "that would be kept. Nothing deleted; add --yes to go ahead.")
        deleted = dashboard.prune(older_than=older_than)
        if options["json"]:
            return self.emit({"deleted": deleted})
        self.stdout.write(f"pruned {deleted} finished job(s)")

    # -- internals -----------------------------------------------------------------------------

    def bulk(self, options: dict[str, Any], action: Callable[..., dashboard.ActionResult],
             verb: str) -> None:
        result = action(options["ids"])
        if options["json"]:
            self.emit({"changed": result.changed,
                       "failed": [{"id": job_id, "reason": why} for job_id, why in result.failed]})
        else:
            for job_id in result.changed:
                self.stdout.write(f"{verb} {job_id}")
            for job_id, why in result.failed:
                self.stderr.write(f"{job_id}: {why}")
        if result.failed:
            raise CommandError(f"{len(result.failed)} of {len(options['ids'])} job(s) could not "
                               f"be {verb.split()[0]}")

    def pause(self, options: dict[str, Any], *, paused: bool) -> None:
        verb = "paused" if paused else "resumed"
        if options["all_queues"] == bool(options["queue"]):
            raise CommandError("give a queue name or --all (not both)")
        if options["all_queues"]:
            names = (dashboard.pause_all if paused else dashboard.resume_all)()
        else:
            self.require_known(options)
            (dashboard.pause_queue if paused else dashboard.resume_queue)(options["queue"])
            names = [options["queue"]]
        if options["json"]:
            return self.emit({verb: names})
        self.stdout.write(f"{verb}: {', '.join(names) or '(no queues)'}")

    def require_known(self, options: dict[str, Any]) -> None:
        """Refuse a queue nothing knows unless ``--create``: its new row would make every
        worker started without ``--queues`` serve it, typo or not."""
        problem = known_queues.unknown(options["queue"])
        if problem and not options["create"]:
            raise CommandError(f"{problem}. Nothing changed; to make a new queue, which "
                               "workers then serve, add --create.")

    def emit(self, data: Any) -> None:
        self.stdout.write(json.dumps(data, indent=2, default=jsonable))

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        for line in table_lines(headers, rows):
            self.stdout.write(line)


#: Who the history of a step cancelled or released here names.
ACTOR = "kathikon_ops"


def require_destructive(what: str) -> None:
    """The rule of ``kathikon.dashboard`` for the workflow actions it does not wrap."""
    if not dashboard.destructive_allowed():
        raise ActionNotAllowed(f"{what} is a destructive action and destructive actions are "
                               "disabled (KATHIKON['ALLOW_DESTRUCTIVE_ACTIONS'] is False)")


def create_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--create", action="store_true",
                         help="Also for a queue no setting, Queue row or live worker knows yet "
                              "(it gets a row, so workers serve it).")


def jsonable(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if hasattr(value, "hex") and not isinstance(value, (int, float)):
        return value.hex
    return str(value)


NONE = "none"  # an option given as 'none': remove that limit


def count(text: str) -> int:
    """An int from 1 to 2**31 - 1 (SQLite cannot bind a LIMIT past 64 bits)."""
    value = int(text)
    if not 1 <= value <= MAX_INT:
        raise argparse.ArgumentTypeError(f"{text!r} is not an int from 1 to {MAX_INT}")
    return value


def page_size(text: str) -> int:
    """An int from 1 to ``dashboard.MAX_LIMIT``, as ``jobs --limit`` takes."""
    value = int(text)
    if not 1 <= value <= dashboard.MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"{text!r} is not an int from 1 to "
                                         f"{dashboard.MAX_LIMIT}")
    return value


def workflow_name(text: str) -> str:
    """A name a workflow can have: one no workflow can have is a typo, not an empty list (and
    PostgreSQL refuses NUL in a query)."""
    try:
        return check_workflow_name(text)
    except InvalidWorkflow as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def optional_int(text: str) -> Any:
    return NONE if text.lower() == NONE else int(text)


def partition_option(text: str) -> Any:
    if text.lower() == NONE:
        return NONE
    by, _, limit = text.rpartition(":")
    if not by:
        raise ValueError(text)
    return {"by": by, "limit": int(limit)}


def rate_option(text: str) -> Any:
    if text.lower() == NONE:
        return NONE
    allowed, _, period = text.partition("/")
    return {"allowed": int(allowed), "period": float(period or 1)}
