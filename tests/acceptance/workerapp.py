"""The Celery app of the worker acceptance tests: safebeat's worker hook on, tasks leave traces.

Configured by environment: SB_BROKER_URL, SB_QUEUE, SB_TRACES (a folder), SB_SCHEDULE
(JSON: entry -> {"seconds": float, "sleep": float, "overlap": "allow"|"forbid", "queue":
name}; an entry without "queue" goes to SB_QUEUE).
SB_ACKS_LATE ("1", the default, or "0") sets task_acks_late; SB_HOOK="0" leaves the worker
hook out (plain Celery, for comparison). SB_REFUSE_DELAYED=N makes each process's first N
publishes of a message with an eta (the copy the hook sends again for later) fail as a
broker refusing them does. safebeat reads its own SAFEBEAT_* variables. Each execution of
`workers.record` writes
one JSON file into SB_TRACES: its task id, entry, window, pid and start and end times.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from celery import Celery
from celery.app.amqp import AMQP
from kombu.exceptions import OperationalError

import safebeat
import safebeat.worker
from safebeat.identity import format_window
from tests.acceptance.brokerkeys import redis_transport_options


class RefusingAMQP(AMQP):
    """Celery's AMQP, whose first SB_REFUSE_DELAYED publishes with an eta are refused."""

    refusals = int(os.environ.get("SB_REFUSE_DELAYED", "0"))

    def _create_task_sender(self) -> Any:
        send = super()._create_task_sender()

        def refusing(producer: Any, name: str, message: Any, *args: Any, **kwargs: Any) -> Any:
            if message.headers.get("eta") and RefusingAMQP.refusals > 0:
                RefusingAMQP.refusals -= 1
                raise OperationalError("injected: the broker refuses this publish")
            return send(producer, name, message, *args, **kwargs)

        return refusing


app = Celery("workers", broker=os.environ["SB_BROKER_URL"], amqp=RefusingAMQP)
if os.environ.get("SB_HOOK", "1") == "1":
    safebeat.worker.install(app)
app.conf.update(
    task_default_queue=os.environ["SB_QUEUE"],
    broker_transport_options=redis_transport_options(os.environ["SB_QUEUE"]),
    beat_schedule={
        name: {
            "task": "workers.record",
            "schedule": float(spec["seconds"]),
            "kwargs": {"sleep": float(spec.get("sleep", 0.0))},
            "options": {
                "safebeat": {"overlap": spec.get("overlap", "allow")},
                **({"queue": spec["queue"]} if "queue" in spec else {}),
            },
        }
        for name, spec in json.loads(os.environ.get("SB_SCHEDULE", "{}")).items()
    },
    result_expires=None,
    task_acks_late=os.environ.get("SB_ACKS_LATE", "1") == "1",
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
)
TRACES = Path(os.environ.get("SB_TRACES", "traces"))


@app.task(name="workers.record", bind=True)
def record(self: object, sleep: float = 0.0) -> None:
    """Run for `sleep` seconds and leave a trace of this execution."""
    started = time.time()
    time.sleep(sleep)
    window = safebeat.current_window()
    trace = {
        "task_id": self.request.id,  # type: ignore[attr-defined]
        "entry": window.entry if window else None,
        "window": format_window(window.window) if window else None,
        "pid": os.getpid(),
        "started": started,
        "finished": time.time(),
    }
    (TRACES / f"{uuid.uuid4().hex}.json").write_text(json.dumps(trace))
