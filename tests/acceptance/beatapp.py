"""The Celery app the acceptance tests run real `celery beat` processes on.

Configured by environment: SB_BROKER_URL, SB_QUEUE, SB_SCHEDULE (JSON: entry -> seconds),
and optionally SB_SAFEBEAT_OPTIONS (JSON: entry -> its `options["safebeat"]`).
safebeat reads its own SAFEBEAT_* variables (SAFEBEAT_URL, SAFEBEAT_CLAIM_TIMEOUT, ...).
"""

from __future__ import annotations

import json
import os

from celery import Celery

app = Celery("acceptance", broker=os.environ["SB_BROKER_URL"])
safebeat_options = json.loads(os.environ.get("SB_SAFEBEAT_OPTIONS", "{}"))
app.conf.update(
    task_default_queue=os.environ["SB_QUEUE"],
    beat_schedule={
        name: {
            "task": f"acceptance.{name}",
            "schedule": float(seconds),
            "options": {"safebeat": safebeat_options.get(name, {})},
        }
        for name, seconds in json.loads(os.environ["SB_SCHEDULE"]).items()
    },
    result_expires=None,
    broker_connection_retry_on_startup=True,
)
