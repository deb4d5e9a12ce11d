"""Runtime-change benchmark: what one replica does when one entry added at run time changes.

What it measures, on SQLite and on PostgreSQL (a database this script creates and drops):
a replica (`safebeat.Scheduler`, kombu's memory broker) starts with `--entries` code
entries (default 20,000, hourly: none is due during the run) and plans each of them once.
Then one entry is added at run time (`safebeat.schedules.add`), edited (`update`: another
schedule) and removed (`remove`); after each change the replica's next tick picks it up.
For each change it reports what that tick cost:

- registered: definitions sent to `Store.register`;
- loaded: entry states the ticks loaded under the tick lock (`Store.tick`'s names);
- digests: entry digests and removed names sent with a heartbeat (`Store.heartbeat`: in
  full at start, then only the digests that changed and the names removed);
- seconds: wall time of the tick that picked the change up, until no entry is due;
- next heartbeat: wall time of the next heartbeat's tick (it sends what changed; the
  store applies it to the digests it keeps for the replica).

How to run it (from the repository root):

    .venv/bin/python tests/benchmarks/bench_runtime_change.py
    .venv/bin/python tests/benchmarks/bench_runtime_change.py --entries 100000 --stores postgres
    .venv/bin/python tests/benchmarks/bench_runtime_change.py --stores django

`--stores django`: safebeat's DatabaseScheduler (`safebeat.contrib.django`, the store
`django://` on PostgreSQL) over `--entries` hourly django-celery-beat rows; one row is
added, edited (another interval) and deleted through the ORM, as the admin does, and each
is timed from the first tick after the scheduler's next look at the rows.

`--json PATH` writes the rows too (tests/benchmarks/bench_targets.py reads them).
Nothing here passes or fails on a number.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere, not only via the editable install
    sys.path.insert(0, str(ROOT))

from celery import Celery  # noqa: E402

import safebeat.schedules  # noqa: E402
from safebeat import Scheduler  # noqa: E402
from safebeat.stores import Store, open_store  # noqa: E402
from tests import services  # noqa: E402
from tests.benchmarks import peers  # noqa: E402

NAMESPACE = "bench-runtime"
DCB_ROWS = "django-celery-beat rows"


class Counted:
    """The store calls one change costs, counted by wrapping the store's methods."""

    def __init__(self, store: Store) -> None:
        self.registered = self.loaded = self.digests = 0
        register, tick, heartbeat = store.register, store.tick, store.heartbeat

        def counted_register(namespace: str, definitions: Sequence[Any], replica: Any) -> Any:
            self.registered += len(definitions)
            return register(namespace, definitions, replica)

        def counted_tick(namespace: str, names: Sequence[str], *args: Any, **kw: Any) -> Any:
            self.loaded += len(names)
            return tick(namespace, names, *args, **kw)

        def counted_heartbeat(
            namespace: str, replica: Any, version: str, digests: Any, *, removed: Any = None
        ) -> Any:
            self.digests += len(digests or ()) + len(removed or ())
            return heartbeat(namespace, replica, version, digests, removed=removed)

        store.register = counted_register  # type: ignore[method-assign]
        store.tick = counted_tick  # type: ignore[method-assign]
        store.heartbeat = counted_heartbeat  # type: ignore[method-assign]

    def reset(self) -> None:
        self.registered = self.loaded = self.digests = 0


def make_app(url: str, entries: int) -> Celery:
    app = Celery("bench", broker="memory://", set_as_current=False)
    app.conf.update(
        safebeat_url=url,
        safebeat_namespace=NAMESPACE,
        beat_schedule={
            f"code-{i}": {"task": "bench.run", "schedule": 3600.0, "args": (i,)}
            for i in range(entries)
        },
    )
    return app


def settle(scheduler: Scheduler) -> float:
    """Tick until no entry is due now; the seconds it took."""
    started = time.perf_counter()
    scheduler.engine.runtime.next_look = 0.0  # look at the runtime entries now
    while True:
        scheduler.tick()
        if not scheduler.engine.pacing.due(time.monotonic(), 1):
            return time.perf_counter() - started


#: A change: its label, and what makes it (the next tick picks it up).
Change = tuple[str, Callable[[], object]]


def run_changes(
    store_name: str, scheduler: Scheduler, counted: Counted, changes: list[Change], entries: int
) -> list[dict[str, Any]]:
    """Start `scheduler`, then make each change and time the ticks that pick it up."""
    rows: list[dict[str, Any]] = []
    # DatabaseScheduler looks at django-celery-beat's change marker this often: wait past
    # its next look, or the change would be picked up after the ticks that are counted.
    pause = 1.5 * getattr(scheduler, "marker_interval", 0.0)
    try:
        started = time.perf_counter()
        scheduler.setup_schedule()
        settle(scheduler)
        print(f"{store_name}: {entries:,} entries started in {time.perf_counter() - started:.1f} s")
        for label, action in changes:
            action()
            time.sleep(pause)
            counted.reset()
            seconds = settle(scheduler)
            scheduler.engine.chores.next_heartbeat = 0.0  # the heartbeat after the change
            started = time.perf_counter()
            scheduler.tick()
            rows.append(
                {
                    "store": store_name,
                    "change": label,
                    "registered": counted.registered,
                    "loaded": counted.loaded,
                    "digests": counted.digests,
                    "seconds": seconds,
                    "heartbeat": time.perf_counter() - started,
                }
            )
    finally:
        scheduler.close()
    return rows


def measure(store_name: str, url: str, entries: int) -> list[dict[str, Any]]:
    app = make_app(url, entries)
    store = open_store(url)
    store.migrate()
    counted = Counted(store)
    changes: list[Change] = [
        ("add", lambda: safebeat.schedules.add(app, "added", "bench.run", 60, store=store)),
        ("edit", lambda: safebeat.schedules.update(app, "added", "bench.run", 120, store=store)),
        ("remove", lambda: safebeat.schedules.remove(app, "added", store=store)),
    ]
    scheduler = Scheduler(app, store=store, lazy=True)  # set up once, by run_changes, timed
    return run_changes(store_name, scheduler, counted, changes, entries)


def save_row(every: int) -> None:
    """Add the row "added", or give it another interval: a model save(), as the admin does."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    interval, _ = IntervalSchedule.objects.get_or_create(
        every=every, period=IntervalSchedule.SECONDS
    )
    task = PeriodicTask.objects.filter(name="added").first()
    task = task or PeriodicTask(name="added", task="bench.run")
    task.interval = interval
    task.save()


def _dispatched(*args: Any) -> None:
    """The rows' task; nothing runs it."""


def measure_rows(url: str, entries: int) -> list[dict[str, Any]]:
    """safebeat's DatabaseScheduler over `entries` hourly django-celery-beat rows; one row
    added, edited and deleted through the ORM."""
    peers.configure_django({"default": url})
    from django_celery_beat.models import PeriodicTask

    from safebeat.contrib.django import DatabaseScheduler
    from tests import djangosite

    djangosite.migrate("default")
    peers.create_dcb_rows(entries, [3600.0], datetime.now(timezone.utc))
    app = make_app("django://", 0)
    for task in (peers.TASK_NAME, "bench.run"):  # the rows' tasks: beat skips unknown ones
        app.task(name=task, shared=False)(_dispatched)
    store = open_store("django://")
    counted = Counted(store)
    changes: list[Change] = [
        ("add", lambda: save_row(60)),
        ("edit", lambda: save_row(120)),
        ("remove", lambda: PeriodicTask.objects.filter(name="added").delete()),
    ]
    scheduler = DatabaseScheduler(app, store=store, lazy=True)  # set up by run_changes
    return run_changes(DCB_ROWS, scheduler, counted, changes, entries)


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| store | change | definitions registered | states loaded | digests heartbeated "
        "| seconds | next heartbeat, seconds |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['store']} | {row['change']} | {row['registered']:,} | {row['loaded']:,} "
            f"| {row['digests']:,} | {row['seconds']:.3f} | {row['heartbeat']:.3f} |"
        )
    return "\n".join(lines)


def in_database(run: Callable[[str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """`run(url)` with a PostgreSQL database of its own, dropped after."""
    admin = services.postgres_admin_url()
    name = f"safebeat_bench_runtime_{uuid.uuid4().hex[:8]}"
    url = services.create_database(admin, name)
    try:
        return run(url)
    finally:
        conf = sys.modules.get("django.conf")
        if conf is not None and conf.settings.configured:  # Django's connections hold it
            from django.db import connections

            connections.close_all()
        services.drop_database(admin, name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--json", type=Path, help="write the rows to this file too")
    opts = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    # Once Django is set up, every app reads its rows: django-celery-beat's rows go last.
    for store_name in sorted(opts.stores.split(","), key=lambda name: name == "django"):
        if store_name == "sqlite":
            with tempfile.TemporaryDirectory() as folder:
                rows += measure("SQLite", f"sqlite:///{folder}/bench.sqlite3", opts.entries)
        elif store_name == "postgres":
            rows += in_database(lambda url: measure("PostgreSQL", url, opts.entries))
        elif store_name == "django":
            rows += in_database(lambda url: measure_rows(url, opts.entries))
        else:
            parser.error(f"unknown store {store_name!r}: sqlite, postgres or django")
    print(
        f"\n{opts.entries:,} code entries (or django-celery-beat rows); one entry added at run "
        "time, edited, removed (or one row, through the ORM):\n"
    )
    print(table(rows))
    if opts.json:
        report = {"entries": opts.entries, "changes": rows}
        opts.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
