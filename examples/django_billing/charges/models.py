"""A subscription is charged once a billing day: `DailyCharge` is unique per (subscription, day).

The unique constraint is the second layer of the seed's fix: whatever runs the task how
often, a second charge for the same day cannot be inserted. `ChargeRun` records each
execution of the task, so the example can show how often it ran.
"""

from django.db import models


class Subscription(models.Model):
    customer = models.CharField(max_length=100)
    price_cents = models.PositiveIntegerField()

    def __str__(self) -> str:
        return self.customer


class DailyCharge(models.Model):
    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE)
    charge_date = models.DateField()
    amount_cents = models.PositiveIntegerField()
    task_id = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["subscription", "charge_date"], name="one_charge_per_subscription_and_day"
            )
        ]


class ChargeRun(models.Model):
    """One execution of the charge task: which billing day, how many charges it made or met."""

    task_id = models.CharField(max_length=64)
    charge_date = models.DateField()
    charged = models.PositiveIntegerField()
    already_charged = models.PositiveIntegerField()
