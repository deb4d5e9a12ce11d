"""The Celery app the acceptance tests run real `celery beat` processes on.

Configured by environment: SB_BROKER_URL, SB_QUEUE, SB_SCHEDULE (JSON: entry -> seconds).
safebeat reads its own SAFEBEAT_* variables (SAFEBEAT_URL, SAFEBEAT_CLAIM_TIMEOUT, ...).
"""

from __future__ import annotations

import json
import os

from celery import Celery

app = Celery("acceptance", broker=os.environ["SB_BROKER_URL"])
app.conf.update(
    task_default_queue=os.environ["SB_QUEUE"],
    beat_schedule={
        name: {"task": f"acceptance.{name}", "schedule": float(seconds)}
        for name, seconds in json.loads(os.environ["SB_SCHEDULE"]).items()
    },
    result_expires=None,
    broker_connection_retry_on_startup=True,
)
