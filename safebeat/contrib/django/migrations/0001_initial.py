"""Schema version 1: entries, dispatches (the claims) and replicas.

On PostgreSQL: `safebeat/stores/postgres/migrations/0001_initial.sql` itself.
"""

from django.db import migrations, models

import safebeat.contrib.django.fields
from safebeat.contrib.django.schema import SchemaVersion


class Migration(migrations.Migration):
    initial = True

    dependencies: list[tuple[str, str]] = []

    operations = [
        SchemaVersion(
            1,
            [
                migrations.CreateModel(
                    name="Entry",
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
                        ("schedule", models.TextField()),
                        ("digest", models.TextField()),
                        ("anchor", models.DateTimeField()),
                        ("defined_at", models.DateTimeField()),
                        ("last_window", models.DateTimeField(null=True)),
                        ("registered_by", models.TextField()),
                    ],
                    options={
                        "verbose_name": "entry",
                        "verbose_name_plural": "entries",
                        "db_table": "safebeat_entry",
                    },
                ),
                migrations.CreateModel(
                    name="Replica",
                    fields=[
                        (
                            "pk",
                            models.CompositePrimaryKey(
                                "namespace",
                                "replica",
                                blank=True,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("namespace", safebeat.contrib.django.fields.KeyField(max_length=128)),
                        ("replica", safebeat.contrib.django.fields.KeyField(max_length=255)),
                        ("host", models.TextField()),
                        ("pid", models.IntegerField()),
                        ("version", models.TextField()),
                        ("started_at", models.DateTimeField()),
                        ("heartbeat_at", models.DateTimeField()),
                        ("definitions", models.JSONField()),
                    ],
                    options={
                        "verbose_name": "replica",
                        "verbose_name_plural": "replicas",
                        "db_table": "safebeat_replica",
                    },
                ),
                migrations.CreateModel(
                    name="Dispatch",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        (
                            "namespace",
                            safebeat.contrib.django.fields.KeyField(
                                max_length=128, verbose_name="namespace"
                            ),
                        ),
                        (
                            "entry",
                            safebeat.contrib.django.fields.KeyField(
                                max_length=512, verbose_name="entry"
                            ),
                        ),
                        ("window_at", models.DateTimeField(verbose_name="window")),
                        (
                            "status",
                            models.TextField(
                                choices=[
                                    ("claimed", "claimed"),
                                    ("sent", "sent"),
                                    ("failed", "failed"),
                                    ("skipped", "skipped"),
                                ],
                                verbose_name="status",
                            ),
                        ),
                        ("task_id", models.TextField(null=True, verbose_name="task id")),
                        ("task_name", models.TextField(null=True, verbose_name="task name")),
                        ("reason", models.TextField(null=True, verbose_name="reason")),
                        (
                            "skipped_from",
                            models.DateTimeField(null=True, verbose_name="skipped from"),
                        ),
                        (
                            "skipped_count",
                            models.IntegerField(null=True, verbose_name="skipped count"),
                        ),
                        ("replica", models.TextField(verbose_name="replica")),
                        ("host", models.TextField(verbose_name="host")),
                        ("pid", models.IntegerField(verbose_name="pid")),
                        ("claimed_at", models.DateTimeField(verbose_name="claimed at")),
                        ("sent_at", models.DateTimeField(null=True, verbose_name="sent at")),
                        ("attempts", models.IntegerField(db_default=1, verbose_name="attempts")),
                        ("error", models.TextField(null=True, verbose_name="error")),
                    ],
                    options={
                        "verbose_name": "dispatch",
                        "verbose_name_plural": "dispatches",
                        "db_table": "safebeat_dispatch",
                        "indexes": [
                            models.Index(
                                condition=models.Q(("status", "claimed")),
                                fields=["namespace", "claimed_at"],
                                name="safebeat_dispatch_unsent",
                            ),
                            models.Index(
                                fields=["namespace", "claimed_at"],
                                name="safebeat_dispatch_claimed_at",
                            ),
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("namespace", "entry", "window_at"),
                                name="safebeat_dispatch_window",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("status__in", ("claimed", "sent", "failed", "skipped"))
                                ),
                                name="safebeat_dispatch_status_check",
                            ),
                        ],
                    },
                ),
            ],
        )
    ]
