"""A Django Task's job names the task in its worker column (its path resolves to the
Tasks backend's worker), so lists, filters, failure summaries and logs show the task.

Rewrites the jobs enqueued before, whose worker column says ``kathikon.backends.TaskWorker``
and whose args name the task. One UPDATE over those rows (docs/tasks-backend.md: 2.5 s per
100,000 such jobs on PostgreSQL here; it takes row locks, no table lock). Reversible:
going back names TaskWorker again.
"""

from django.db import migrations
from django.db.models.fields.json import KT
from django.db.models.functions import Length

TASK_WORKER = "kathikon.backends.TaskWorker"
MAX_WORKER_PATH = 255


def name_the_task(apps, schema_editor):
    Job = apps.get_model("kathikon", "Job")
    (Job.objects.using(schema_editor.connection.alias)
     .filter(worker=TASK_WORKER, args__task__isnull=False)
     .alias(path_length=Length(KT("args__task")))
     .filter(path_length__gt=0, path_length__lte=MAX_WORKER_PATH)
     .update(worker=KT("args__task")))


def name_task_worker(apps, schema_editor):
    Job = apps.get_model("kathikon", "Job")
    (Job.objects.using(schema_editor.connection.alias)
     .filter(meta__task_backend__isnull=False).exclude(worker=TASK_WORKER)
     .update(worker=TASK_WORKER))


class Migration(migrations.Migration):
    dependencies = [("kathikon", "0016_workflows")]

    operations = [migrations.RunPython(name_the_task, name_task_worker, elidable=True)]
