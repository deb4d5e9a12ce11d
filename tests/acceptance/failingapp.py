"""The Celery app of the pause_after_failures acceptance test: one entry whose task raises.

Configured by environment: SB_BROKER_URL, SB_QUEUE, SB_SECONDS (the entry's interval) and
SB_PAUSE_AFTER (its `pause_after_failures`). safebeat reads its own SAFEBEAT_* variables.
"""

from __future__ import annotations

import os

from celery import Celery

import safebeat.worker
from tests.acceptance.brokerkeys import redis_transport_options

app = Celery("failing", broker=os.environ["SB_BROKER_URL"])
safebeat.worker.install(app)
app.conf.update(
    task_default_queue=os.environ["SB_QUEUE"],
    broker_transport_options=redis_transport_options(os.environ["SB_QUEUE"]),
    beat_schedule={
        "always-fails": {
            "task": "failing.explode",
            "schedule": float(os.environ.get("SB_SECONDS", "1")),
            "options": {
                "safebeat": {"pause_after_failures": int(os.environ.get("SB_PAUSE_AFTER", "3"))}
            },
        }
    },
    result_expires=None,
    broker_connection_retry_on_startup=True,
)


@app.task(name="failing.explode")
def explode() -> None:
    """Fail, as a job with a broken dependency does every time."""
    raise RuntimeError("the partner API is down")
