"""The Celery app of the demo (`examples/demo.py`): four periodic entries, no server needed.

The broker is kombu's `filesystem://` transport: every published message becomes one file
in `$DEMO_BROKER_FOLDER`, which the demo counts afterwards. safebeat's store comes from
`$SAFEBEAT_URL`, which safebeat reads by itself (default `sqlite:///safebeat.sqlite3`).
No worker runs in the demo; the beats only publish, so the tasks below never execute.

Run one beat by hand (from the `examples/` folder, or with it on PYTHONPATH); the broker
folder must exist:

    mkdir -p /tmp/demo-broker
    DEMO_BROKER_FOLDER=/tmp/demo-broker celery -A demo_app beat -S safebeat.Scheduler
"""

from __future__ import annotations

import os
from pathlib import Path

from celery import Celery
from celery.schedules import crontab

#: Every entry of the demo: name -> (task, period in seconds, or None for "every minute").
#: Each entry has its own task name, so a stock beat's message (which carries only the
#: task name) can be attributed to its entry.
ENTRIES: dict[str, tuple[str, int | None]] = {
    "report-every-2s": ("demo.report_every_2s", 2),
    "report-every-5s": ("demo.report_every_5s", 5),
    "report-every-10s": ("demo.report_every_10s", 10),
    "report-every-minute": ("demo.report_every_minute", None),
}

BROKER_FOLDER = Path(os.environ.get("DEMO_BROKER_FOLDER", "broker")).resolve()

app = Celery("demo")
app.conf.update(
    broker_url="filesystem://",
    broker_transport_options={
        # The same folder in and out: published messages stay there, one file each.
        "data_folder_in": str(BROKER_FOLDER),
        "data_folder_out": str(BROKER_FOLDER),
        "processed_folder": str(BROKER_FOLDER / "processed"),
        "control_folder": str(BROKER_FOLDER / "control"),
    },
    # No result backend and nothing to expire: beat adds no cleanup entry of its own.
    result_expires=None,
    timezone="UTC",
    beat_schedule={
        name: {
            "task": task,
            "schedule": crontab() if seconds is None else float(seconds),
        }
        for name, (task, seconds) in ENTRIES.items()
    },
)


def _report(which: str) -> str:
    return f"{which} report done"


@app.task(name="demo.report_every_2s")
def report_every_2s() -> str:
    return _report("2-second")


@app.task(name="demo.report_every_5s")
def report_every_5s() -> str:
    return _report("5-second")


@app.task(name="demo.report_every_10s")
def report_every_10s() -> str:
    return _report("10-second")


@app.task(name="demo.report_every_minute")
def report_every_minute() -> str:
    return _report("minutely")
