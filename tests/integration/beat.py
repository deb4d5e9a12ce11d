"""Driving `safebeat.Scheduler` in-process on the real clock, as celery's beat service does."""

from __future__ import annotations

import time

from celery import Celery

from safebeat import Scheduler


def make_app(broker_url: str, queue: str, store_url: str, namespace: str, **conf: object) -> Celery:
    """A Celery app with one entry every second, safebeat on `store_url`, short timeouts.

    Its beat runs `safebeat.Scheduler`, so what reads the app's schedule (the CLI, the web
    console) reads no django-celery-beat rows, whatever Django other tests configured.
    """
    app = Celery("faults", broker=broker_url, set_as_current=False)
    conf = {"beat_scheduler": "safebeat.Scheduler", **conf}
    app.conf.update(
        task_default_queue=queue,
        beat_schedule={"every-1s": {"task": "faults.tick", "schedule": 1.0}},
        result_expires=None,
        safebeat_url=store_url,
        safebeat_namespace=namespace,
        safebeat_claim_timeout=2,
        safebeat_lock_timeout=1,
        broker_connection_timeout=1,
        **conf,
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
