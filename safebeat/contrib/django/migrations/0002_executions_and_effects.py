"""Schema version 2: what the worker hook records about each execution, and effect keys.

On PostgreSQL: `safebeat/stores/postgres/migrations/0002_executions_and_effects.sql` itself.
"""

from django.db import migrations, models

import safebeat.contrib.django.fields
from safebeat.contrib.django.schema import SchemaVersion


def _dispatch_field(name: str, field: models.Field) -> migrations.AddField:  # type: ignore[type-arg]
    return migrations.AddField(model_name="dispatch", name=name, field=field)


class Migration(migrations.Migration):
    dependencies = [("safebeat", "0001_initial")]

    operations = [
        SchemaVersion(
            2,
            [
                _dispatch_field(
                    "started_at", models.DateTimeField(null=True, verbose_name="started at")
                ),
                _dispatch_field(
                    "finished_at", models.DateTimeField(null=True, verbose_name="finished at")
                ),
                _dispatch_field(
                    "outcome",
                    models.TextField(
                        choices=[
                            ("success", "success"),
                            ("failure", "failure"),
                            ("retry", "retry"),
                        ],
                        null=True,
                        verbose_name="outcome",
                    ),
                ),
                _dispatch_field("runtime", models.DurationField(null=True, verbose_name="runtime")),
                _dispatch_field("worker", models.TextField(null=True, verbose_name="worker")),
                _dispatch_field("retries", models.IntegerField(null=True, verbose_name="retries")),
                _dispatch_field("runs", models.IntegerField(db_default=0, verbose_name="runs")),
                _dispatch_field(
                    "duplicates", models.IntegerField(db_default=0, verbose_name="duplicates")
                ),
                migrations.AddConstraint(
                    model_name="dispatch",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("outcome__in", ("success", "failure", "retry"))),
                        name="safebeat_dispatch_outcome_check",
                    ),
                ),
                migrations.AddIndex(
                    model_name="dispatch",
                    index=models.Index(
                        condition=models.Q(
                            ("started_at__isnull", False), ("finished_at__isnull", True)
                        ),
                        fields=["namespace", "entry", "started_at"],
                        name="safebeat_dispatch_running",
                    ),
                ),
                migrations.CreateModel(
                    name="Effect",
                    fields=[
                        (
                            "pk",
                            models.CompositePrimaryKey(
                                "namespace",
                                "key",
                                blank=True,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("namespace", safebeat.contrib.django.fields.KeyField(max_length=128)),
                        ("key", safebeat.contrib.django.fields.KeyField(max_length=640)),
                        ("owner", models.TextField()),
                        ("task_id", models.TextField(null=True)),
                        ("claimed_at", models.DateTimeField()),
                        ("expires_at", models.DateTimeField()),
                    ],
                    options={
                        "verbose_name": "effect",
                        "verbose_name_plural": "effects",
                        "db_table": "safebeat_effect",
                        "indexes": [
                            models.Index(
                                fields=["namespace", "expires_at"],
                                name="safebeat_effect_expires_at",
                            )
                        ],
                    },
                ),
            ],
        )
    ]
