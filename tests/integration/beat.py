"""Driving `safebeat.Scheduler` in-process, as celery's beat service does: on the real clock
(`run`), or on a clock that moves only between ticks (`tick_until`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from celery import Celery

from safebeat import Scheduler
from safebeat.testing import FakeClock


def make_app(broker_url: str, queue: str, store_url: str, namespace: str, **conf: object) -> Celery:
    """A Celery app with one entry every second, safebeat on `store_url`, short timeouts;
    `conf` adds settings or replaces these.

    Its beat runs `safebeat.Scheduler`, so what reads the app's schedule (the CLI, the web
    console) reads no django-celery-beat rows, whatever Django other tests configured.
    """
    app = Celery("faults", broker=broker_url, set_as_current=False)
    app.conf.update(
        {
            "task_default_queue": queue,
            "beat_scheduler": "safebeat.Scheduler",
            "beat_schedule": {"every-1s": {"task": "faults.tick", "schedule": 1.0}},
            "result_expires": None,
            "safebeat_url": store_url,
            "safebeat_namespace": namespace,
            "safebeat_claim_timeout": 2,
            "safebeat_lock_timeout": 1,
            "broker_connection_timeout": 1,
            **conf,
        }
    )
    return app


def run(scheduler: Scheduler, seconds: float) -> None:
    """Tick like celery's Service loop for `seconds` of real time."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        delay = scheduler.tick()
        # A slow tick can end past `end`: never a negative sleep.
        left = end - time.monotonic()
        if delay and left > 0:
            time.sleep(min(max(delay, 0.0), left, 0.5))


def tick_until(
    scheduler: Scheduler,
    clock: FakeClock,
    done: Callable[[], bool],
    *,
    step: float = 0.25,
    timeout: float = 60.0,
) -> None:
    """Tick `scheduler`, whose `monotonic` is `clock`, until `done()` says so.

    Between ticks the sleep a tick asks for (at most `step`) passes on `clock` and in real
    time, so that the store's clock (the database's own) moves on too. The time a tick
    itself takes never passes on `clock`: however slow the machine, no deadline the
    scheduler measures (publishing within claim_timeout / 2, backoffs) passes during one.
    `timeout` (real seconds) only bounds a test whose condition never comes.
    """
    give_up = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < give_up, (
            f"not done after {timeout:g} s of ticking; so far: {scheduler.metrics.totals}"
        )
        # In whole microseconds, rounded up: FakeClock moves by timedeltas, and a sleep of
        # less than one would not move it at all.
        pause = math.ceil(min(max(scheduler.tick(), 0.0), step) * 1e6) / 1e6
        clock.advance(pause)
        time.sleep(pause)
