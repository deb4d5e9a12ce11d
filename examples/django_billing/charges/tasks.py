"""The daily charge, made safe to repeat.

The billing day comes from the window safebeat sent the task for
(`safebeat.current_window()`), never from "today": a run delayed past midnight still
bills the day it was scheduled for. Under stock beat there is no window, and the task
falls back on the clock. To make a demo of minutes out of days, every
`SECONDS_PER_DAY` seconds count as one billing day (the calendar wraps after a century).
"""

from datetime import date, datetime, timedelta, timezone

from celery import shared_task
from django.db import IntegrityError, transaction

import safebeat
from charges.models import ChargeRun, DailyCharge, Subscription

SECONDS_PER_DAY = 4
FIRST_DAY = date(2026, 1, 1)


def billing_day(instant: datetime) -> date:
    """The billing day an instant falls in (one day every SECONDS_PER_DAY seconds)."""
    return FIRST_DAY + timedelta(days=(int(instant.timestamp()) // SECONDS_PER_DAY) % 36500)


@shared_task(name="charges.charge_daily", bind=True)
def charge_daily(self) -> int:  # type: ignore[no-untyped-def]
    """Charge every subscription for the billing day of this run; return the charges made."""
    window = safebeat.current_window()
    day = billing_day(window.window if window else datetime.now(timezone.utc))
    charged = already = 0
    for subscription in Subscription.objects.all():
        try:
            with transaction.atomic():
                DailyCharge.objects.create(
                    subscription=subscription,
                    charge_date=day,
                    amount_cents=subscription.price_cents,
                    task_id=self.request.id,
                )
            charged += 1
        except IntegrityError:
            already += 1  # charged today already: the constraint refused a second charge
    ChargeRun.objects.create(
        task_id=self.request.id, charge_date=day, charged=charged, already_charged=already
    )
    return charged
