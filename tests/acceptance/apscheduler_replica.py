"""One app replica running APScheduler's BackgroundScheduler with safebeat's executor.

    python -m tests.acceptance.apscheduler_replica STORE_URL NAMESPACE RUNS_FILE [thread|process]

An every-second cron job appends "<window> <pid>" to RUNS_FILE each time it runs. Prints
"ready" once the scheduler runs; SIGTERM shuts the scheduler down (waiting for running
jobs) and exits 0.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from apscheduler.schedulers.background import BackgroundScheduler

import safebeat
from safebeat.contrib.apscheduler import ProcessPoolExecutor, ThreadPoolExecutor
from safebeat.identity import format_window


def record(runs_file: str) -> None:
    """The job: one line per run, written in one append."""
    window = safebeat.current_window()
    assert window is not None
    line = f"{format_window(window.window)} {os.getpid()}\n"
    fd = os.open(runs_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def main(url: str, namespace: str, runs_file: str, pool: str = "thread") -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")
    settings = {"safebeat_url": url, "safebeat_namespace": namespace}
    executor = (
        ProcessPoolExecutor(1, settings=settings)
        if pool == "process"
        else ThreadPoolExecutor(settings=settings)
    )
    scheduler = BackgroundScheduler(executors={"default": executor}, timezone="UTC")
    scheduler.add_job(
        f"{__spec__.name}:record",  # importable by name, also in a process pool's children
        "cron",
        second="*",
        id="every-second",
        args=[runs_file],
        misfire_grace_time=5,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    scheduler.start()
    print("ready", flush=True)
    stop.wait()
    scheduler.shutdown(wait=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
