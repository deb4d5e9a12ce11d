"""The Celery app behind the web console's browser test: a small shop's schedule.

Configured by environment: SB_BROKER_URL and SB_QUEUE; safebeat reads its own SAFEBEAT_*
variables. The worker hook is on, so the console shows outcomes: `sync-crm` always
fails, `send-invoices` always succeeds, `weekly-report` is not due during a test, nor is
`reports/../send-invoices`, whose name is a path that leads to `send-invoices`.
"""

from __future__ import annotations

import os

from celery import Celery
from celery.schedules import crontab

import safebeat.worker
from tests.acceptance.brokerkeys import redis_transport_options

app = Celery("shop", broker=os.environ["SB_BROKER_URL"])
safebeat.worker.install(app)
app.conf.update(
    timezone="Europe/Berlin",  # the console shows local times beside UTC
    task_default_queue=os.environ["SB_QUEUE"],
    broker_transport_options=redis_transport_options(os.environ["SB_QUEUE"]),
    beat_schedule={
        "send-invoices": {"task": "shop.send_invoices", "schedule": 2.0},
        "sync-crm": {"task": "shop.sync_crm", "schedule": 3.0},
        "weekly-report": {
            "task": "shop.weekly_report",
            "schedule": crontab(minute="0", hour="6", day_of_week="1"),
        },
        # Not in the pictures of docs/ (`make screenshots`): a name no user would pick.
        **(
            {}
            if os.environ.get("SAFEBEAT_SCREENSHOTS")
            else {
                "reports/../send-invoices": {
                    "task": "shop.weekly_report",
                    "schedule": crontab(minute="0", hour="6", day_of_week="1"),
                }
            }
        ),
    },
    result_expires=None,
    broker_connection_retry_on_startup=True,
)


@app.task(name="shop.send_invoices")
def send_invoices() -> None:
    """Succeed at once."""


@app.task(name="shop.sync_crm")
def sync_crm() -> None:
    """Fail, as a task whose remote API is down does."""
    raise RuntimeError("CRM API answered 503 Service Unavailable")


@app.task(name="shop.weekly_report")
def weekly_report() -> None:
    """Succeed at once."""
