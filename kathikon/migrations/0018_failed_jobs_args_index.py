"""PostgreSQL: a GIN index over the args of dead, retryable and cancelled jobs, for the job
list's structured search (``args.user_id=42``, kathikon.storage.search).

Partial, so the jobs that complete pay nothing for it: a claim or an acknowledgement
writes a new row version, and only a job entering one of these states enters the index.
MariaDB and SQLite have no such index; there the search reads the rows it filters.
"""

from django.db import migrations

CREATE = """
CREATE INDEX IF NOT EXISTS kathikon_job_failed_args ON kathikon_job
USING gin (args jsonb_path_ops) WHERE state IN ('dead', 'retryable', 'cancelled')
"""
DROP = "DROP INDEX IF EXISTS kathikon_job_failed_args"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("kathikon", "0017_task_jobs_name_their_task")]

    operations = [migrations.RunPython(create, drop)]
