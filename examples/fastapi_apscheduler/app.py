"""A FastAPI service that sends the weekly report from an in-process APScheduler.

What it shows. The seed incident's setup: a `BackgroundScheduler` started in the app's
lifespan, so every replica of the service schedules the report. With safebeat's executor
(`safebeat.contrib.apscheduler.ThreadPoolExecutor`) the replicas share one ledger of
claimed run times, and each week's report goes out from one replica only. The only
changes from the incident's code are the executor, a fixed job id, and an explicit zone.

What it needs. `pip install "safebeat[apscheduler]" fastapi uvicorn` (the repository's
dev extra has them). The store is `$SAFEBEAT_URL` (default `sqlite:///safebeat.sqlite3`,
one host; use PostgreSQL or Redis across hosts); the "mail server" is the SQLite file
`$OUTBOX`.

How to run it. `run.py` beside this file starts three replicas and counts the mails.
One replica by hand, from the repository root:

    SAFEBEAT_URL=sqlite:///reports.sqlite3 REPORT_EVERY_SECONDS=5 \\
        .venv/bin/uvicorn app:app --app-dir examples/fastapi_apscheduler --port 8001

`REPORT_EVERY_SECONDS` replaces the weekly schedule (Mondays 06:00, Moscow time) with
one every N seconds, for demonstrations; `WITHOUT_SAFEBEAT=1` uses APScheduler's stock
executor, to see the incident itself.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import report  # the job, beside this file (uvicorn --app-dir puts it on the path)
from apscheduler.executors.pool import ThreadPoolExecutor as StockThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from fastapi import FastAPI

from safebeat.contrib.apscheduler import ThreadPoolExecutor

ZONE = "Europe/Moscow"


def make_scheduler() -> BackgroundScheduler:
    """The app's scheduler: the weekly report, its run times claimed in safebeat's store."""
    if os.environ.get("WITHOUT_SAFEBEAT") == "1":
        executor = StockThreadPoolExecutor()  # the incident: every replica sends
    else:
        # The store comes from $SAFEBEAT_URL; the namespace keeps this app's claims apart.
        executor = ThreadPoolExecutor(settings={"safebeat_namespace": "reports-api"})
    scheduler = BackgroundScheduler(executors={"default": executor}, timezone=ZONE)
    every = os.environ.get("REPORT_EVERY_SECONDS")
    trigger = (
        CronTrigger(second=f"*/{int(every)}", timezone=ZONE)
        if every
        else CronTrigger(day_of_week="mon", hour=6, timezone=ZONE)
    )
    scheduler.add_job(
        report.send_weekly_report,
        trigger,
        id="weekly-report",  # the same in every replica: the claim is keyed on it
        replace_existing=True,
        misfire_grace_time=60,  # a replica busy for a minute still sends; later is a miss
    )
    return scheduler


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    scheduler = make_scheduler()
    scheduler.start()
    yield
    scheduler.shutdown()  # waits for a report being sent


app = FastAPI(lifespan=lifespan)


@app.get("/health")
def health() -> dict[str, bool]:
    return {"ok": True}
