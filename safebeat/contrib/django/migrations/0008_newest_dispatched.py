"""Schema version 7: an entry's newest dispatched window in one index probe.

On PostgreSQL: `safebeat/stores/postgres/migrations/0007_newest_dispatched.sql` itself.
"""

from django.db import migrations, models

from safebeat.contrib.django.schema import SchemaVersion


class Migration(migrations.Migration):
    dependencies = [("safebeat", "0007_runtime_entries")]

    operations = [
        SchemaVersion(
            7,
            [
                migrations.AddIndex(
                    model_name="dispatch",
                    index=models.Index(
                        condition=models.Q(("status__in", ["claimed", "sent"])),
                        fields=["namespace", "entry", "window_at"],
                        name="safebeat_dispatch_dispatched",
                    ),
                ),
            ],
        )
    ]
