"""The weekly report job: one mail to each recipient, labelled with the report's window.

The "mail server" is a SQLite file (`$OUTBOX`) that keeps every mail it receives, one
row each: duplicates are counted, never merged. `$RECIPIENTS` sets the list's size
(12,400, as in the incident).
"""

from __future__ import annotations

import os
import sqlite3
from datetime import datetime, timezone

import safebeat

SCHEMA = "CREATE TABLE IF NOT EXISTS mail (window TEXT, recipient INTEGER, sender INTEGER)"


def send_weekly_report() -> None:
    """Mail the report to every recipient, for the window this run belongs to."""
    current = safebeat.current_window()
    # Without safebeat the job has no window; the incident's code used "now".
    when = current.window if current is not None else _now_in_period()
    recipients = int(os.environ.get("RECIPIENTS", "12400"))
    mails = [(when.isoformat(), recipient, os.getpid()) for recipient in range(recipients)]
    outbox = sqlite3.connect(os.environ["OUTBOX"], timeout=60)
    try:
        with outbox:
            outbox.execute(SCHEMA)
            outbox.executemany("INSERT INTO mail VALUES (?, ?, ?)", mails)
    finally:
        outbox.close()


def _now_in_period() -> datetime:
    """Now, rounded down to the demonstration's period, so runs of one slot share a label."""
    period = int(os.environ.get("REPORT_EVERY_SECONDS", "1"))
    now = datetime.now(timezone.utc).replace(microsecond=0)
    return now.replace(second=now.second - now.second % period)
