import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="ChargeRun",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("task_id", models.CharField(max_length=64)),
                ("charge_date", models.DateField()),
                ("charged", models.PositiveIntegerField()),
                ("already_charged", models.PositiveIntegerField()),
            ],
        ),
        migrations.CreateModel(
            name="Subscription",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("customer", models.CharField(max_length=100)),
                ("price_cents", models.PositiveIntegerField()),
            ],
        ),
        migrations.CreateModel(
            name="DailyCharge",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("charge_date", models.DateField()),
                ("amount_cents", models.PositiveIntegerField()),
                ("task_id", models.CharField(max_length=64)),
                (
                    "subscription",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, to="charges.subscription"
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("subscription", "charge_date"),
                        name="one_charge_per_subscription_and_day",
                    )
                ],
            },
        ),
    ]
