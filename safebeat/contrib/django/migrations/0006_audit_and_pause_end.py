"""Schema version 5: pauses with an end and a note, and the audit trail of operator actions.

On PostgreSQL: `safebeat/stores/postgres/migrations/0005_audit_and_pause_end.sql` itself.
"""

from django.db import migrations, models

import safebeat.contrib.django.fields
from safebeat.contrib.django.schema import SchemaVersion


class Migration(migrations.Migration):
    dependencies = [("safebeat", "0005_execution_leases")]

    operations = [
        SchemaVersion(
            5,
            [
                migrations.AddField(
                    model_name="entry",
                    name="paused_until",
                    field=models.DateTimeField(null=True),
                ),
                migrations.AddField(
                    model_name="entry",
                    name="pause_note",
                    field=models.TextField(null=True),
                ),
                migrations.CreateModel(
                    name="Audit",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        (
                            "namespace",
                            safebeat.contrib.django.fields.KeyField(
                                max_length=128, verbose_name="namespace"
                            ),
                        ),
                        ("at", models.DateTimeField(verbose_name="at")),
                        ("actor", models.TextField(verbose_name="actor")),
                        ("action", models.TextField(verbose_name="action")),
                        ("entry", models.TextField(null=True, verbose_name="entry")),
                        ("windows", models.JSONField(verbose_name="windows")),
                        ("note", models.TextField(null=True, verbose_name="note")),
                    ],
                    options={
                        "verbose_name": "operator action",
                        "verbose_name_plural": "operator actions",
                        "db_table": "safebeat_audit",
                        "indexes": [
                            models.Index(fields=["namespace", "at"], name="safebeat_audit_at")
                        ],
                    },
                ),
            ],
        )
    ]
