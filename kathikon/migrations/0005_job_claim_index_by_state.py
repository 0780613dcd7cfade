# The claim index gains fallback_fields: where the database has no partial indexes
# (MariaDB/MySQL) it becomes (queue, state, -priority, available_at). PostgreSQL and
# SQLite keep their partial index as it is, so only those other databases rebuild it.

import kathikon.indexes
from django.db import migrations, models

WHERE = models.Q(("state__in", ["available", "retryable"]))
OLD = kathikon.indexes.PartialIndex(fields=["queue", "-priority", "available_at"],
                                    name="kathikon_job_claim", where=WHERE)
NEW = kathikon.indexes.PartialIndex(fallback_fields=["queue", "state", "-priority", "available_at"],
                                    fields=["queue", "-priority", "available_at"],
                                    name="kathikon_job_claim", where=WHERE)


def _swap(old, new):
    def run(apps, schema_editor):
        if schema_editor.connection.features.supports_partial_indexes:
            return  # the partial index is unchanged there
        job = apps.get_model("kathikon", "Job")
        schema_editor.remove_index(job, old)
        schema_editor.add_index(job, new)
    return run


class Migration(migrations.Migration):

    dependencies = [
        ('kathikon', '0004_job_leaner_fk_indexes'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name='job', name='kathikon_job_claim'),
                migrations.AddIndex(model_name='job', index=NEW),
            ],
            database_operations=[
                migrations.RunPython(_swap(OLD, NEW), _swap(NEW, OLD), elidable=False),
            ],
        ),
    ]
