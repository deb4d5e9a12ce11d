"""The schedulers of the peer benchmark, set up the same way in a burst run and in a beat process.

Kinds: stock beat (`celery.beat.PersistentScheduler`), django-celery-beat's
`DatabaseScheduler` (PostgreSQL through Django), RedBeat (`redbeat.RedBeatScheduler`) and
safebeat on SQLite, PostgreSQL, Redis and `django://` (PostgreSQL). The peers' scheduler
classes here are the originals plus one thing: before each message they note the instant
the scheduler itself held the entry due (`last_run_at + run_every`), so a benchmark can
tell how late the message was. safebeat's messages carry their window (`safebeat_window`).

`beat_app(config)` builds the Celery app of one `celery beat` replica (see beat_app.py);
`record_publishes(path)` makes a process write one line per published message:
`<task id> <pid> <publish instant> <due instant or ->`.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from celery import Celery, signals
from celery.beat import PersistentScheduler

from safebeat.identity import WINDOW_HEADER, parse_window

TASK_NAME = "safebeat_bench.dispatched"

STOCK = "stock beat"
DCB = "django-celery-beat"
REDBEAT = "RedBeat"
SQLITE = "safebeat + SQLite"
POSTGRES = "safebeat + PostgreSQL"
REDIS = "safebeat + Redis"
DJANGO = "safebeat + django://"
#: Kinds by their short name on the command line.
KINDS = {
    "stock": STOCK,
    "dcb": DCB,
    "redbeat": REDBEAT,
    "sqlite": SQLITE,
    "postgres": POSTGRES,
    "redis": REDIS,
    "django": DJANGO,
}
SAFEBEAT_KINDS = (SQLITE, POSTGRES, REDIS, DJANGO)
#: Kinds whose store is Django's database.
DJANGO_KINDS = (DCB, DJANGO)

_due = threading.local()


def due_of(entry: Any) -> float | None:
    """When a Celery `ScheduleEntry` on an interval fell due: its last run plus its interval."""
    last = getattr(entry, "last_run_at", None)
    every = getattr(getattr(entry, "schedule", None), "run_every", None)
    if last is None or every is None:
        return None
    if last.tzinfo is None:
        last = last.replace(tzinfo=timezone.utc)
    return float((last + every).timestamp())


class RecordsDue:
    """Mixin for a stock-style scheduler: notes each entry's due instant while it is sent."""

    def apply_async(self, entry: Any, *args: Any, **kwargs: Any) -> Any:
        _due.value = due_of(entry)
        try:
            return super().apply_async(entry, *args, **kwargs)  # type: ignore[misc]
        finally:
            _due.value = None


class StockBeat(RecordsDue, PersistentScheduler):  # type: ignore[misc]
    """Stock beat, noting due instants."""


def redbeat_class() -> type:
    from redbeat import RedBeatScheduler

    class RedBeat(RecordsDue, RedBeatScheduler):  # type: ignore[misc]
        """RedBeat, noting due instants."""

    return RedBeat


def dcb_class() -> type:
    """django-celery-beat's scheduler, noting due instants (Django must be set up first)."""
    from django_celery_beat.schedulers import DatabaseScheduler

    class DjangoCeleryBeat(RecordsDue, DatabaseScheduler):  # type: ignore[misc]
        """django-celery-beat's DatabaseScheduler, noting due instants."""

    return DjangoCeleryBeat


class Recorder:
    """Writes a line per message this process publishes (after_task_publish)."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("a", encoding="utf-8", buffering=1)  # a line at a time
        self.pid = os.getpid()
        signals.after_task_publish.connect(self._on_publish, weak=False)

    def _on_publish(self, headers: Any = None, **_: Any) -> None:
        headers = headers or {}
        due = getattr(_due, "value", None)
        window = headers.get(WINDOW_HEADER)
        if due is None and window:
            due = parse_window(window).timestamp()
        self.file.write(
            f"{headers.get('id')} {self.pid} {time.time():.6f} "
            f"{'-' if due is None else f'{due:.6f}'}\n"
        )


def read_records(paths: list[Path]) -> list[tuple[str, int, float, float | None]]:
    """(task id, pid, publish instant, due instant) of every line the recorders wrote."""
    records = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if len(parts) != 4:
                continue  # a line cut by SIGKILL
            task_id, pid, published, due = parts
            records.append(
                (task_id, int(pid), float(published), None if due == "-" else float(due))
            )
    return records


# --- Django -----------------------------------------------------------------------------


def django_database(url: str) -> dict[str, object]:
    """Django's DATABASES entry for a libpq URL, without TLS (a counting proxy may sit between).

    Connections persist (CONN_MAX_AGE None): with Django's default of 0,
    django-celery-beat's `close_old_connections()` would reconnect on every tick.
    """
    from tests.djangosite import postgres_database

    database = postgres_database(url)
    database["OPTIONS"] = {"sslmode": "disable", "gssencmode": "disable"}
    database["CONN_MAX_AGE"] = None
    return database


def configure_django(databases: dict[str, str]) -> None:
    """Set Django up in this process with these aliases (alias -> PostgreSQL URL)."""
    from tests import djangosite

    djangosite.configure({alias: django_database(url) for alias, url in databases.items()})


# --- the app of one beat replica ----------------------------------------------------------


def entry_intervals(count: int, intervals: list[float]) -> list[float]:
    """Entry i's interval: the list, round and round."""
    return [intervals[i % len(intervals)] for i in range(count)]


def beat_schedule(count: int, intervals: list[float]) -> dict[str, Any]:
    return {
        f"bench-{i:06d}": {
            "task": TASK_NAME,
            "schedule": timedelta(seconds=every),
            "args": (i,),
        }
        for i, every in enumerate(entry_intervals(count, intervals))
    }


def _dispatched(*args: Any) -> None:
    """The task every benchmark entry sends; nothing runs it."""


def beat_app(config: dict[str, Any]) -> Celery:
    """The Celery app of one benchmark beat replica, as `config` (JSON) describes it.

    Keys: kind, broker, queue, count, intervals, record (a file), and per kind: store
    (safebeat_url), namespace, django (the database URL), redbeat_url, redbeat_prefix,
    redbeat_lock_timeout, max_loop_interval.
    """
    kind = config["kind"]
    if kind in DJANGO_KINDS:
        configure_django({"default": config["django"]})
    app = Celery("safebeat_bench", broker=config["broker"])
    settings: dict[str, Any] = {
        "task_default_queue": config["queue"],
        "result_expires": None,
        "broker_connection_retry_on_startup": True,
        "beat_schedule": (
            {} if kind == DCB else beat_schedule(config["count"], config["intervals"])
        ),
    }
    if kind in SAFEBEAT_KINDS:
        settings.update(safebeat_url=config["store"], safebeat_namespace=config["namespace"])
    if kind == REDBEAT:
        settings.update(
            redbeat_redis_url=config["redbeat_url"], redbeat_key_prefix=config["redbeat_prefix"]
        )
        if config.get("redbeat_lock_timeout"):
            settings["redbeat_lock_timeout"] = config["redbeat_lock_timeout"]
    if config.get("max_loop_interval"):
        settings["beat_max_loop_interval"] = config["max_loop_interval"]
    app.conf.update(settings)
    app.task(name=TASK_NAME, shared=False)(_dispatched)
    if config.get("record"):
        Recorder(Path(config["record"]))
    return app


def scheduler_path(kind: str) -> str:
    """The -S argument of `celery beat` for a kind."""
    return {
        STOCK: "tests.benchmarks.peers:StockBeat",
        DCB: "tests.benchmarks.beat_app:DjangoCeleryBeat",
        REDBEAT: "tests.benchmarks.beat_app:RedBeat",
    }.get(kind, "safebeat.Scheduler")


def create_dcb_rows(count: int, intervals: list[float], last_run_at: datetime) -> None:
    """Replace django-celery-beat's PeriodicTask rows with `count` interval entries."""
    from django.db import connection
    from django_celery_beat.models import IntervalSchedule, PeriodicTask, PeriodicTasks

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE django_celery_beat_periodictask")
    schedules = {}
    for every in sorted(set(intervals)):
        schedules[every], _ = IntervalSchedule.objects.get_or_create(
            every=int(every), period=IntervalSchedule.SECONDS
        )
    PeriodicTask.objects.bulk_create(
        (
            PeriodicTask(
                name=f"bench-{i:06d}",
                task=TASK_NAME,
                interval=schedules[every],
                args=f"[{i}]",
                last_run_at=last_run_at,
            )
            for i, every in enumerate(entry_intervals(count, intervals))
        ),
        batch_size=5000,
    )
    PeriodicTasks.update_changed()
