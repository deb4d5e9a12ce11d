"""The Celery app of the Sentry Crons acceptance test: Sentry monitoring beat, check-ins kept.

Configured by environment: SB_BROKER_URL, SB_QUEUE and SB_CHECKINS (a folder where each
process appends the check-ins its Sentry client sends, instead of sending them).
safebeat reads its own SAFEBEAT_* variables. Beat and the worker load the same module,
as an application does: `sentry_sdk.init` with `CeleryIntegration(monitor_beat_tasks=True)`.
"""

from __future__ import annotations

import os

import sentry_sdk
from celery import Celery
from celery.schedules import crontab
from sentry_sdk.integrations.celery import CeleryIntegration

import safebeat.worker
from tests.acceptance.brokerkeys import redis_transport_options
from tests.sentrycapture import DSN, FileCheckIns

sentry_sdk.init(
    dsn=DSN,
    integrations=[CeleryIntegration(monitor_beat_tasks=True)],
    transport=FileCheckIns,
    default_integrations=False,
)

app = Celery("sentry", broker=os.environ["SB_BROKER_URL"])
safebeat.worker.install(app)
app.conf.update(
    task_default_queue=os.environ["SB_QUEUE"],
    broker_transport_options=redis_transport_options(os.environ["SB_QUEUE"]),
    beat_schedule={
        "every-minute": {"task": "sentry.ok", "schedule": 60.0},
        "cron-moscow": {
            "task": "sentry.fails",
            "schedule": crontab(minute="*"),
            "options": {"safebeat": {"timezone": "Europe/Moscow"}},
        },
        # Under a minute: Sentry Crons cannot describe it, so it runs without a monitor.
        "fast": {"task": "sentry.ok", "schedule": 5.0},
    },
    result_expires=None,
    broker_connection_retry_on_startup=True,
)


@app.task(name="sentry.ok")
def ok() -> None:
    """Succeeds: its window's check-in ends `ok`."""


@app.task(name="sentry.fails")
def fails() -> None:
    """Fails: its window's check-in ends `error`."""
    raise RuntimeError("this task fails on purpose")
