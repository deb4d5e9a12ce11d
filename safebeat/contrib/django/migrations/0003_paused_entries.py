"""Schema version 3: entries paused for every replica (pause / resume).

On PostgreSQL: `safebeat/stores/postgres/migrations/0003_paused_entries.sql` itself.
"""

from django.db import migrations, models

from safebeat.contrib.django.schema import SchemaVersion


class Migration(migrations.Migration):
    dependencies = [("safebeat", "0002_executions_and_effects")]

    operations = [
        SchemaVersion(
            3,
            [
                migrations.AddField(
                    model_name="entry",
                    name="paused",
                    field=models.BooleanField(db_default=False),
                ),
            ],
        )
    ]
