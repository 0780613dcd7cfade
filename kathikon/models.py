"""Kathikon's tables: jobs, their exceptional events, queues, nodes, batches and cron schedules.

Query sets hold named filters only; every state change goes through
``kathikon.storage``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.apps import apps
from django.db import models
from django.db.models import Q

from kathikon.compat import TASK_WORKER
from kathikon.exceptions import InvalidQueue
from kathikon.ids import new_id
from kathikon.indexes import PartialIndex, PartialUniqueConstraint
from kathikon.limits import LIMIT_KEYS
from kathikon.limits import parse as parse_limits
from kathikon.states import (
    CLAIMABLE_STATES,
    LISTED_STATES,
    RESTING_STATES,
    TERMINAL_STATES,
    JobState,
)

__all__ = ["Batch", "CronSchedule", "Job", "JobEvent", "JobState", "Node", "Queue",
           "RateWindow", "Workflow", "WorkflowDep"]


class Job(models.Model):
    """A durable job: a worker, its args, and where it is in its life."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    queue = models.CharField(max_length=63, default="default")
    worker = models.CharField(max_length=255)
    args = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=10, choices=JobState.choices,
                             default=JobState.AVAILABLE)
    priority = models.SmallIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=20)
    attempts = models.PositiveIntegerField(default=0)
    scheduled_at = models.DateTimeField(null=True, blank=True)
    available_at = models.DateTimeField()
    inserted_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(
        null=True, blank=True, help_text="When the job reached a terminal state.")
    cancelled_at = models.DateTimeField(null=True, blank=True)
    errors = models.JSONField(default=list, blank=True)
    result = models.JSONField(null=True, blank=True)
    batch = models.ForeignKey("Batch", null=True, blank=True, on_delete=models.DO_NOTHING,
                              db_constraint=False, db_index=False, related_name="jobs")
    # Indexed below: partial for parent_job; cron by the unique (cron, scheduled_at) key.
    parent_job = models.ForeignKey("self", null=True, blank=True, on_delete=models.DO_NOTHING,
                                   db_constraint=False, db_index=False, related_name="children")
    cron = models.ForeignKey("CronSchedule", null=True, blank=True, on_delete=models.DO_NOTHING,
                             db_constraint=False, db_index=False, related_name="jobs")
    attempted_by = models.CharField(max_length=255, blank=True, default="")
    lease = models.BigIntegerField(default=0, help_text="Fencing token: bumped at every claim.")
    meta = models.JSONField(default=dict, blank=True)
    # Unique jobs (kathikon.unique): the key, NULL once the job leaves the states whose bits
    # are in unique_states; every state change writes both in the same statement.
    unique_key = models.CharField(max_length=64, null=True, blank=True, editable=False)
    unique_states = models.SmallIntegerField(null=True, blank=True, editable=False)
    # The crash budget (docs/reliability.md): a job rescued from a process that died is a
    # suspect and runs alone in its process; a crash while alone is charged to it.
    suspect = models.BooleanField(
        default=False, db_default=False,
        help_text="Rescued from a worker process that died: runs alone in a process next.")
    quarantine_lease = models.BigIntegerField(
        null=True, blank=True, help_text="The lease under which it last ran alone.")
    crashes = models.PositiveSmallIntegerField(
        default=0, db_default=0, help_text="Worker processes it took down while running alone.")
    # Workflows (kathikon.workflows): NULL for every job outside one. A step's counters say
    # how many of its dependencies have not settled yet and how many ended dead or cancelled;
    # they change only under the step row's lock, in the transaction that settles a dependency.
    workflow = models.ForeignKey("Workflow", null=True, blank=True, on_delete=models.DO_NOTHING,
                                 db_constraint=False, db_index=False, related_name="steps")
    step = models.CharField(max_length=63, null=True, blank=True,
                            help_text="The step's name in its workflow.")
    deps_waiting = models.PositiveIntegerField(
        null=True, blank=True, help_text="Dependencies not settled yet (workflow steps).")
    deps_failed = models.PositiveIntegerField(
        null=True, blank=True, help_text="Dependencies that ended dead or cancelled.")
    on_dep_failure = models.CharField(
        max_length=8, null=True, blank=True,
        help_text="What a failed dependency does to this step: cancel, run or hold.")

    #: Set on the job ``insert`` returns: True when an equal unique job already existed.
    conflict: bool = False
    #: True once ``kathikon.complete_in_transaction(job)`` committed (its ack is then skipped).
    completed_in_transaction: bool = False
    #: Set by a cancel or retry of a workflow step: what settling it changed downstream
    #: (a ``kathikon.storage.settle.Settled``), for the signals sent after it.
    settled: Any = None

    class Meta:
        ordering = ["-id"]
        indexes = [
            # The claim path: one queue, claimable states, best priority, oldest first.
            # Without partial indexes (MariaDB/MySQL) the state leads after the queue: the
            # claim scans each claimable state's range in order and never walks finished jobs.
            PartialIndex(fields=["queue", "-priority", "available_at"],
                         where=Q(state__in=["available", "retryable"]),
                         fallback_fields=["queue", "state", "-priority", "available_at"],
                         name="kathikon_job_claim"),
            # The promoter: scheduled jobs by due time.
            PartialIndex(fields=["available_at"], where=Q(state="scheduled"),
                         name="kathikon_job_promote"),
            # The admin and reports: state filters in id (= insertion) order, and the same
            # within one queue or worker (the id last: a filtered list newest first and
            # capped counts need no sort and no heap visit, also at 10M jobs). On PostgreSQL
            # they hold only resting jobs: every claim and ack is a non-HOT update, so an
            # index whose condition matched running or completed rows took an entry twice
            # per job. Executing jobs are found through kathikon_job_executing (few rows),
            # completed ones through kathikon_job_completed and kathikon_job_done.
            # Available jobs are left out of the first two: the claim index holds them by
            # queue, and an insert or a step's release then writes two entries fewer (a
            # fan-out of 10,000 steps released in 0.14 s instead of 0.18). The worker's
            # index keeps them: no other index finds a worker's available jobs.
            PartialIndex(fields=["state", "id"], where=Q(state__in=LISTED_STATES),
                         partial_on=("postgresql",), name="kathikon_job_state"),
            PartialIndex(fields=["queue", "state", "id"], where=Q(state__in=LISTED_STATES),
                         partial_on=("postgresql",), name="kathikon_job_queue_state"),
            PartialIndex(fields=["worker", "state", "id"], where=Q(state__in=RESTING_STATES),
                         partial_on=("postgresql",), name="kathikon_job_worker_state"),
            # The admin's inserted date range, over every job. Not an id range: inserted_at
            # and the UUIDv7 id are separate clock readings (insert_many reads the time once
            # per call, cron jobs take the scheduler's clock), so they can differ.
            models.Index(fields=["inserted_at"], name="kathikon_job_inserted"),
            # The pruner, "finished in the last hour" per queue and the charts (index-only
            # scans). Only finished jobs: inserts and claims never touch it.
            PartialIndex(fields=["completed_at", "state", "queue"],
                         where=Q(completed_at__isnull=False), name="kathikon_job_completed"),
            # Completed jobs by queue and worker: the queues and workers that hold any (loose
            # scans) and the capped per-queue counts, now that the general indexes leave
            # completed jobs out. Plain elsewhere, where no state change touches it (InnoDB
            # and SQLite update an index only when one of its columns changes).
            PartialIndex(fields=["queue", "worker"], where=Q(state="completed"),
                         partial_on=("postgresql",), name="kathikon_job_done"),
            # Batches: "is any child of this batch unfinished?" in one index probe (replaces
            # the plain batch_id index; jobs outside batches are not in it where the
            # database has partial indexes).
            PartialIndex(fields=["batch", "state"], where=Q(batch__isnull=False),
                         name="kathikon_job_batch_state"),
            # Batches and reruns look children up by parent; most jobs have none.
            PartialIndex(fields=["parent_job"], where=Q(parent_job__isnull=False),
                         name="kathikon_job_parent"),
            # The lifeline: executing jobs by node.
            PartialIndex(fields=["attempted_by"], where=Q(state__in=["claimed", "running"]),
                         name="kathikon_job_executing"),
            # Quarantine: crash suspects waiting to run alone (there are rarely any).
            PartialIndex(fields=["suspect", "queue"],
                         where=Q(suspect=True, state__in=["available", "retryable"]),
                         name="kathikon_job_suspect"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(priority__gte=-100, priority__lte=100),
                                   name="kathikon_job_priority_range"),
            models.CheckConstraint(condition=Q(max_attempts__gte=1),
                                   name="kathikon_job_max_attempts"),
            # Cron exactly-once: one job per schedule and tick (NULLs never clash). Partial
            # where possible: jobs without a schedule (nearly all) never touch it.
            PartialUniqueConstraint(fields=["cron", "scheduled_at"],
                                    where=Q(cron__isnull=False), name="kathikon_job_cron_tick"),
            # Unique jobs: one job per key; jobs outside their unique states hold NULL.
            PartialUniqueConstraint(fields=["unique_key"], where=Q(unique_key__isnull=False),
                                    name="kathikon_job_unique_key"),
            # No index names a step's workflow here: a step's name and the list of a
            # workflow's steps live in kathikon_workflowstep (WorkflowStep), written once at
            # insert. On PostgreSQL every release, claim and ack is a non-HOT update that
            # adds an entry to each index holding the row: a unique (workflow, step) index
            # here cost a step ~2.4x a plain job's ack (migration 0019).
        ]
        permissions = [
            ("retry_job", "Can retry jobs"),
            ("cancel_job", "Can cancel jobs"),
            ("rerun_job", "Can rerun jobs"),
        ]

    def __str__(self) -> str:
        return f"{self.worker} {self.id.hex} [{self.state}]"

    @property
    def shown_worker(self) -> str:
        """What runs this job, as a person knows it: the worker path, or for a Django Task
        its import path (jobs the Tasks backend enqueued before the worker column held the
        task's path name ``kathikon.backends.TaskWorker`` there)."""
        if self.worker == TASK_WORKER and isinstance(self.args, dict) and self.args.get("task"):
            return str(self.args["task"])
        return self.worker

    @property
    def hex_id(self) -> str:
        return self.id.hex

    @classmethod
    def build(cls, worker: Any, args: dict[str, Any] | None = None, **options: Any) -> Job:
        """An unsaved job, validated exactly as ``kathikon.insert`` would (prefer ``insert``).

        Reached through the app config so this module need not import the spec builder,
        which imports the workers, which name this model: no import cycle."""
        job: Job = apps.get_app_config("kathikon").build_job(  # type: ignore[attr-defined]
            worker, args, options)
        return job

    def dep_result(self, name: str) -> Any:
        """The result of the dependency this workflow step calls ``name`` (``KeyError`` if none).

        The first call reads every dependency's result in one query; later calls
        use that. A dependency on a whole workflow gives ``{step: result}`` of its steps.
        """
        return self.dep_results()[name]

    def dep_results(self) -> dict[str, Any]:
        """``{name: result}`` of every dependency of this workflow step (one query, cached)."""
        cached = self.__dict__.get("_dep_results")
        if cached is None:
            cached = apps.get_app_config("kathikon").dep_results(self)  # type: ignore[attr-defined]
            self.__dict__["_dep_results"] = cached
        return cached

    def is_claimable(self, now: dt.datetime) -> bool:
        """True when the job is available or retryable and due at ``now``."""
        return self.state in CLAIMABLE_STATES and self.available_at <= now

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES


class JobEvent(models.Model):
    """An exceptional event in a job's history (cancel, retry, rescue, rerun, admin action).

    Ordinary events (inserted, started, completed, failed) are derived from the
    job's own timestamps and errors, so a successful run writes no event row.
    """

    job_id = models.UUIDField(db_index=True)
    kind = models.CharField(max_length=32)
    at = models.DateTimeField()
    actor = models.CharField(max_length=255, blank=True, default="")
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.job_id.hex} at {self.at:%Y-%m-%d %H:%M:%S}"


class Queue(models.Model):
    """A queue's shared state: paused or not, concurrency and limit overrides, rate window."""

    name = models.CharField(max_length=63, primary_key=True)
    paused = models.BooleanField(default=False)
    concurrency = models.PositiveIntegerField(null=True, blank=True,
                                              help_text="Overrides the settings for every node.")
    limits = models.JSONField(null=True, blank=True, help_text=(
        "Overrides the settings' global_limit, partition and rate_limit (null: unlimited)."))
    # The current fixed rate-limit window of this queue and the starts counted in it.
    rate_window = models.DateTimeField(null=True, blank=True, editable=False)
    rate_count = models.PositiveIntegerField(default=0, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        permissions = [("pause_queue", "Can pause and resume queues")]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """The admin's check of a limits override: known keys with valid values."""
        from django.core.exceptions import ValidationError

        if self.limits is None:
            return
        if not isinstance(self.limits, dict) or set(self.limits) - set(LIMIT_KEYS):
            raise ValidationError({"limits": f"a dict with some of {', '.join(LIMIT_KEYS)}, "
                                             "e.g. {\"global_limit\": 3}"})
        try:
            parse_limits(self.limits)
        except InvalidQueue as exc:
            raise ValidationError({"limits": str(exc)}) from None


class RateWindow(models.Model):
    """Starts counted in the current rate-limit window of one partition of a queue.

    Only for rate limits counted per partition key (``rate_limit`` with ``by``);
    written under the queue row's lock by the limited claim.
    """

    queue = models.CharField(max_length=63)
    partition_key = models.CharField(max_length=255)
    window_start = models.DateTimeField()
    starts = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["queue", "partition_key"],
                                               name="kathikon_ratewindow_key")]

    def __str__(self) -> str:
        return f"{self.queue}/{self.partition_key}: {self.starts} since {self.window_start}"


class Node(models.Model):
    """A worker process: its heartbeats let other nodes rescue its jobs if it vanishes."""

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        STOPPING = "stopping", "Stopping"
        STOPPED = "stopped", "Stopped"
        # Set by a lifeline once the heartbeat is older than RESCUE_AFTER; unlike stopped it
        # frees nothing (its jobs are still charged as a crash's) and the node's own next
        # heartbeat, if it was only frozen, makes it running again.
        CRASHED = "crashed", "Crashed"

    name = models.CharField(max_length=255, primary_key=True)
    hostname = models.CharField(max_length=255, blank=True, default="")
    pid = models.IntegerField(null=True, blank=True)
    queues = models.JSONField(default=dict, blank=True)
    #: worker path → when this process first held back a job of it (it cannot import it)
    unknown_workers = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)
    instance = models.CharField(
        max_length=32, blank=True, default="", db_default="",
        help_text="The process that holds the name now; one live process per node name.")

    class Meta:
        ordering = ["-heartbeat_at"]

    def __str__(self) -> str:
        return self.name


class Batch(models.Model):
    """Fan-out/fan-in: child jobs and a callback enqueued once they are all terminal."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        CLOSED = "closed", "Closed"
        COMPLETED = "completed", "Completed"

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    parent_job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.DO_NOTHING,
                                   db_constraint=False, related_name="batches")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    on_complete_worker = models.CharField(max_length=255, blank=True, default="")
    on_complete_args = models.JSONField(default=dict, blank=True)
    on_complete_options = models.JSONField(default=dict, blank=True)
    callback_job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.DO_NOTHING,
                                     db_constraint=False, related_name="+")
    inserted_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-inserted_at"]
        verbose_name_plural = "batches"
        indexes = [
            # The scheduler's sweep for closed batches whose children have all finished.
            PartialIndex(fields=["status"], where=Q(status="closed"),
                         name="kathikon_batch_closed"),
        ]

    def __str__(self) -> str:
        return f"batch {self.id.hex} [{self.status}]"


class CronSchedule(models.Model):
    """A recurring schedule: each due tick enqueues exactly one job."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    name = models.CharField(max_length=200, unique=True, null=True, blank=True,
                            help_text="Set for static schedules from settings.KATHIKON['CRON'].")
    worker = models.CharField(max_length=255)
    args = models.JSONField(default=dict, blank=True)
    expression = models.CharField(max_length=200)
    timezone = models.CharField(max_length=64, default="UTC")
    queue = models.CharField(max_length=63, blank=True, default="")
    priority = models.SmallIntegerField(null=True, blank=True)
    max_attempts = models.PositiveIntegerField(null=True, blank=True)
    paused = models.BooleanField(default=False)
    static = models.BooleanField(default=False, help_text="Managed by settings; synced at start.")
    catch_up = models.BooleanField(
        default=True, help_text="Ticks missed while no worker ran fire once on the next start "
        "(off: they are skipped).")
    last_fire_at = models.DateTimeField(null=True, blank=True)
    next_fire_at = models.DateTimeField(null=True, blank=True)
    inserted_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["next_fire_at"]
        permissions = [("pause_cronschedule", "Can pause and resume cron schedules")]

    def __str__(self) -> str:
        return self.name or f"{self.worker} @ {self.expression}"


class Workflow(models.Model):
    """A graph of jobs that depend on jobs: see kathikon.workflows.

    ``steps_unfinished`` counts its steps (and sub-workflows) not yet finished;
    ``steps_failed`` those that ended dead or cancelled. Both change under this
    row's lock in the transaction that settles a step, so the workflow finishes
    exactly once.
    """

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        COMPLETED = "completed", "Completed"  # every step completed
        FAILED = "failed", "Failed"  # finished, some step dead or cancelled
        CANCELLED = "cancelled", "Cancelled"  # cancelled by a person

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    name = models.CharField(max_length=200)
    parent_workflow = models.ForeignKey("self", null=True, blank=True,
                                        on_delete=models.DO_NOTHING, db_constraint=False,
                                        related_name="sub_workflows")
    step = models.CharField(max_length=63, null=True, blank=True,
                            help_text="A sub-workflow's name among its parent's steps.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    steps_total = models.PositiveIntegerField(default=0)
    steps_unfinished = models.PositiveIntegerField(default=0)
    steps_failed = models.PositiveIntegerField(default=0)
    meta = models.JSONField(default=dict, blank=True)
    inserted_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-inserted_at"]
        indexes = [models.Index(fields=["status", "inserted_at"],
                                name="kathikon_workflow_status")]
        permissions = [("cancel_workflow", "Can cancel workflows"),
                       ("release_workflow", "Can release held workflow steps")]

    def __str__(self) -> str:
        return f"{self.name} {self.id.hex} [{self.status}]"


class WorkflowStep(models.Model):
    """A workflow step's name, unique in its workflow, and the index of a workflow's steps.

    One row per step, written with the step and never updated: lookups by workflow
    (its page, its cancel, ``append``'s names, a whole-workflow dependency's results)
    go through here to the jobs by primary key, so the job table keeps no index on
    ``workflow_id`` that every state change of a step would have to write. Deleted
    with its job; ``Job.workflow_id`` and ``Job.step`` stay on the job for display.
    """

    job_id = models.UUIDField(primary_key=True, help_text="The step (a job's id).")
    workflow_id = models.UUIDField()
    step = models.CharField(max_length=63)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workflow_id", "step"],
                                               name="kathikon_step_name")]

    def __str__(self) -> str:
        return f"{self.step} of workflow {self.workflow_id.hex}"


class WorkflowDep(models.Model):
    """One edge of a workflow graph: step ``job_id`` waits for a job or a whole workflow."""

    job_id = models.UUIDField(help_text="The step that waits.")
    dep_job_id = models.UUIDField(null=True, blank=True)
    dep_workflow_id = models.UUIDField(null=True, blank=True)
    name = models.CharField(max_length=200, help_text="What the step calls this dependency.")

    class Meta:
        indexes = [
            models.Index(fields=["job_id"], name="kathikon_dep_job"),
            # Settling a step or a workflow finds what waits for it.
            PartialIndex(fields=["dep_job_id"], where=Q(dep_job_id__isnull=False),
                         name="kathikon_dep_on_job"),
            PartialIndex(fields=["dep_workflow_id"], where=Q(dep_workflow_id__isnull=False),
                         name="kathikon_dep_on_workflow"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id.hex} waits for {self.name}"
