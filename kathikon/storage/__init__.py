"""The SQL seam: the only module that reads or writes job state.

The public API, the admin, the commands and the runtime all go through these
functions; vendor fast paths (PostgreSQL ``UPDATE … RETURNING``, ``unnest``
bulk inserts, ``NOTIFY``) live here and nowhere else.
"""

from __future__ import annotations

from django.core.management import call_command

from kathikon.storage import (
    batches,
    cron,
    notify,
    partitions,
    prepared,
    queues,
    reports,
    schema,
    vendor,
    workflows,
)
from kathikon.storage.acks import Ack, Acked, ack_jobs, write_acks
from kathikon.storage.claims import claim_job, claim_jobs, start_job
from kathikon.storage.errors import is_transient
from kathikon.storage.events import events_for, record_event, record_events
from kathikon.storage.inserts import insert_job, insert_jobs
from kathikon.storage.jobs import (
    all_jobs,
    cancel_job,
    clear_jobs,
    count_by_state,
    dead_jobs,
    delete_job,
    fetch_job,
    job_pk,
    promote_scheduled,
    prune_jobs,
    rerun_job,
    retry_job,
    update_job,
)
from kathikon.storage.nodes import (
    delete_stale_nodes,
    fetch_node,
    heartbeat,
    live_nodes,
    mark_node_stopped,
    mark_node_stopping,
    register_node,
    set_node_queues,
    set_node_unknown_workers,
    stale_nodes,
)
from kathikon.storage.queues import (
    ensure_queue,
    paused_queues,
    queue_rows,
    set_all_paused,
    set_paused,
)
from kathikon.storage.rescue import Rescued, held_jobs, rescue_jobs
from kathikon.storage.runtime import count_due_jobs, executing_jobs
from kathikon.storage.vendor import alias, db_now, is_postgres

# The seed's names for the same operations.
insert = insert_job
update = update_job
fetch = fetch_job
delete = delete_job
claim = claim_jobs
all = all_jobs


def setup() -> None:
    """Create or upgrade Kathikon's tables (runs its migrations)."""
    call_command("migrate", "kathikon", database=alias(), verbosity=0, interactive=False)


def reset() -> None:
    """Empty every Kathikon table (tests)."""
    from kathikon.models import Batch, CronSchedule, Node, Queue

    clear_jobs()
    for model in (Batch, CronSchedule, Node, Queue):
        model.objects.using(alias()).all().delete()


__all__ = [
    "Ack", "Acked", "Rescued", "ack_jobs", "alias", "all", "all_jobs", "batches", "cancel_job",
    "claim",
    "claim_job", "claim_jobs", "clear_jobs", "count_by_state", "count_due_jobs", "cron", "db_now",
    "dead_jobs", "delete", "delete_job",
    "delete_stale_nodes", "ensure_queue", "events_for", "executing_jobs", "fetch", "fetch_job",
    "fetch_node",
    "heartbeat", "held_jobs", "insert", "insert_job", "insert_jobs", "is_postgres",
    "is_transient", "job_pk",
    "live_nodes", "mark_node_stopped", "mark_node_stopping", "notify", "partitions",
    "paused_queues",
    "prepared",
    "promote_scheduled", "prune_jobs", "queue_rows", "queues", "record_event", "record_events",
    "register_node", "reports", "rerun_job", "rescue_jobs", "reset", "retry_job", "schema",
    "set_all_paused",
    "set_node_queues", "set_node_unknown_workers",
    "set_paused", "setup", "stale_nodes", "start_job", "update", "update_job",
    "vendor",
    "workflows",
    "write_acks",
]
