"""Schema version 6: entries added at run time (safebeat.schedules, `safebeat schedule`).

On PostgreSQL: `safebeat/stores/postgres/migrations/0006_runtime_entries.sql` itself.
"""

from django.db import migrations, models

import safebeat.contrib.django.fields
from safebeat.contrib.django.schema import SchemaVersion


class Migration(migrations.Migration):
    dependencies = [("safebeat", "0006_audit_and_pause_end")]

    operations = [
        SchemaVersion(
            6,
            [
                migrations.CreateModel(
                    name="RuntimeEntry",
                    fields=[
                        (
                            "pk",
                            models.CompositePrimaryKey(
                                "namespace",
                                "name",
                                blank=True,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("namespace", safebeat.contrib.django.fields.KeyField(max_length=128)),
                        ("name", safebeat.contrib.django.fields.KeyField(max_length=512)),
                        ("spec", models.TextField()),
                        ("updated_at", models.DateTimeField()),
                    ],
                    options={
                        "verbose_name": "entry added at run time",
                        "verbose_name_plural": "entries added at run time",
                        "db_table": "safebeat_runtime_entry",
                    },
                ),
                migrations.CreateModel(
                    name="Counter",
                    fields=[
                        (
                            "pk",
                            models.CompositePrimaryKey(
                                "namespace",
                                "name",
                                blank=True,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("namespace", safebeat.contrib.django.fields.KeyField(max_length=128)),
                        ("name", safebeat.contrib.django.fields.KeyField(max_length=512)),
                        ("value", models.BigIntegerField()),
                    ],
                    options={"db_table": "safebeat_counter"},
                ),
            ],
        )
    ]
