"""Schema version 4: execution leases (a running execution renews `lease_until`).

On PostgreSQL: `safebeat/stores/postgres/migrations/0004_execution_leases.sql` itself.
"""

from django.db import migrations, models

from safebeat.contrib.django.schema import SchemaVersion


class Migration(migrations.Migration):
    dependencies = [("safebeat", "0004_binary_keys_on_mysql")]

    operations = [
        SchemaVersion(
            4,
            [
                migrations.AddField(
                    model_name="dispatch",
                    name="lease_until",
                    field=models.DateTimeField(null=True, verbose_name="lease until"),
                ),
            ],
        )
    ]
