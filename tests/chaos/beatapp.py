"""The Celery app the chaos suite runs real `celery beat` processes on, stock or safebeat.

Configured by environment: SB_BROKER_URL, SB_QUEUE, and SB_SCHEDULE (JSON: entry ->
{"every": seconds, "misfire": "all" (optional), "args": [...] (optional)}), and SB_CRONTABS
(how many of `tests.chaos.crontabs.crontab_entries` to add, minutely crontabs). With
SB_STOCK=1 the per-entry safebeat options are left out, so stock beat sends exactly what
a user's stock configuration would. safebeat reads its own SAFEBEAT_* variables.
"""

from __future__ import annotations

import json
import os
import select
import time
from typing import Any

from celery import Celery
from celery.schedules import crontab

from tests.chaos.crontabs import crontab_entries


def beat_schedule(spec: dict[str, dict[str, Any]], *, stock: bool) -> dict[str, Any]:
    """The `beat_schedule` for the JSON `spec` (see the module docstring)."""
    schedule: dict[str, Any] = {}
    for name, entry in spec.items():
        item: dict[str, Any] = {
            "task": f"chaos.{name}",
            "schedule": float(entry["every"]),
            "args": list(entry.get("args", [])),
        }
        if entry.get("misfire") and not stock:
            item["options"] = {"safebeat": {"misfire": entry["misfire"]}}
        schedule[name] = item
    return schedule


def crontab_schedule(count: int, *, stock: bool) -> dict[str, Any]:
    """The `beat_schedule` of the first `count` crontab entries of the chaos lab."""
    schedule: dict[str, Any] = {}
    for name, entry in crontab_entries(count).items():
        hours = ",".join(str(hour) for hour in entry["hours"])
        item: dict[str, Any] = {"task": f"chaos.{name}", "schedule": crontab("*", hours)}
        if not stock:
            options = {"timezone": entry["zone"], "misfire": entry["misfire"]}
            if "catchup_limit" in entry:
                options["catchup_limit"] = entry["catchup_limit"]
            item["options"] = {"safebeat": options}
        schedule[name] = item
    return schedule


def _sleep(seconds: float) -> None:
    select.select([], [], [], seconds)


if os.environ.get("FAKETIME"):
    # libfaketime 0.9.10 with FAKETIME_DONT_FAKE_MONOTONIC turns time.sleep (an absolute
    # clock_nanosleep on the monotonic clock) into EINVAL, and beat's loop would die on it.
    # select() waits the same time and is left alone. Only the sleep changes, not the clocks.
    time.sleep = _sleep  # type: ignore[assignment]  # same behaviour, narrower signature

_STOCK = os.environ.get("SB_STOCK") == "1"
app = Celery("chaos", broker=os.environ["SB_BROKER_URL"])
app.conf.update(
    task_default_queue=os.environ["SB_QUEUE"],
    beat_schedule=beat_schedule(json.loads(os.environ["SB_SCHEDULE"]), stock=_STOCK)
    | crontab_schedule(int(os.environ.get("SB_CRONTABS", "0")), stock=_STOCK),
    result_expires=None,
    broker_connection_retry_on_startup=True,
)
