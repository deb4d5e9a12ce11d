"""Backlog benchmark: how long beat takes to plan, and to dispatch, after a long outage.

What it measures, in one run:

1. Planning: `windows.due` for N minutely crontab entries (`--entries`, default 5,000, in
   UTC, policy `latest`) whose last decided window is `--backlogs` ago (default 2 min,
   3 h and 12 h), the work a PostgreSQL tick does while its transaction is open. Timed
   twice: with today's counting of the skipped windows, and with the counting safebeat
   did before (one window at a time, up to 10,000 per entry), reproduced here by
   swapping the `count_windows` that `due` uses for its step-by-step form. Median of `--repeats`.

2. Recovery on PostgreSQL: N minutely crontab entries registered by a real
   `safebeat.Scheduler` in a database this script creates and drops, then the store's
   state rewound by `--rewind` (default 12 h: every entry's definition and anchor moved
   back, as after a 12 h outage); the scheduler is then driven the way
   `celery.beat.Service.start` drives it, with the default `safebeat_lock_timeout`, and
   timed from its first tick until every entry's newest window has been published to a
   queue of this run's own on the Redis broker. Again with today's counting and with
   the step-by-step one; a run still short of N after `--cap` seconds is reported as such.

What it needs: PostgreSQL and Redis, found the way the tests find them (tests/services.py).

How to run it (from the repository root):

    .venv/bin/python tests/benchmarks/bench_backlog.py
    .venv/bin/python tests/benchmarks/bench_backlog.py --entries 1000 --rewind 6h

Nothing here passes or fails on a number.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
from celery import Celery
from celery.schedules import crontab

import safebeat
from safebeat import windows
from safebeat.config import Config
from safebeat.entries import compile_entry
from safebeat.stores import open_store
from safebeat.windows import Policy, decide
from safebeat.windows import counting as window_counting

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere, not only via the editable install
    sys.path.insert(0, str(ROOT))

from tests import services  # noqa: E402 - needs ROOT on sys.path
from tests.benchmarks.bench_dispatch import (  # noqa: E402
    TASK_NAME,
    BrokerQueue,
    Published,
    _dispatched,
)

UTC = timezone.utc
COUNTINGS = ("today", "step by step")


@contextlib.contextmanager
def counting(kind: str) -> Iterator[None]:
    """Count skipped windows today's way, or one window at a time as safebeat did before."""
    if kind == "today":
        yield
        return
    original = decide.count_windows  # what `due` counts its skipped spans with

    def stepwise(
        rule: windows.Rule, first: datetime, last: datetime, anchor: datetime | None = None
    ) -> int | None:
        if isinstance(rule, windows.IntervalRule):
            return original(rule, first, last, anchor)
        return window_counting._count_stepwise(  # the previous counting, on purpose
            rule, first, last, anchor, limit=windows.MAX_COUNTED_SKIPS
        )

    decide.count_windows = stepwise  # type: ignore[assignment]
    try:
        yield
    finally:
        decide.count_windows = original  # type: ignore[assignment]


def parse_duration(text: str) -> timedelta:
    units = {"s": "seconds", "min": "minutes", "m": "minutes", "h": "hours", "d": "days"}
    for suffix in sorted(units, key=len, reverse=True):
        if text.endswith(suffix):
            return timedelta(**{units[suffix]: float(text.removesuffix(suffix))})
    raise argparse.ArgumentTypeError(f"{text!r}: a duration like 2min, 3h, 12h or 30d")


def plan_seconds(entries: int, backlog: timedelta, repeats: int) -> float:
    """Median seconds to decide every entry's windows once after `backlog` of outage."""
    rule = compile_entry(
        "job",
        {"task": TASK_NAME, "schedule": crontab()},
        app_timezone=ZoneInfo("UTC"),
        config=Config(),
    ).rule
    rules = [rule] * entries
    now = datetime(2026, 1, 15, 12, 0, 0, 250_000, tzinfo=UTC)
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        for each in rules:
            windows.due(each, after=now - backlog, now=now, policy=Policy())
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def make_app(queue: BrokerQueue, entries: int, namespace: str) -> Celery:
    app = Celery("safebeat_bench_backlog", broker=queue.url, set_as_current=False)
    app.conf.update(
        task_default_queue=queue.name,
        result_expires=None,
        broker_connection_retry_on_startup=True,
        timezone="UTC",
        safebeat_namespace=namespace,
        beat_schedule={
            f"backlog-{i:05d}": {"task": TASK_NAME, "schedule": crontab(), "args": (i,)}
            for i in range(entries)
        },
    )
    app.task(name=TASK_NAME, shared=False)(_dispatched)
    return app


def recovery_seconds(
    pg_url: str,
    queue: BrokerQueue,
    published: Published,
    *,
    entries: int,
    rewind: timedelta,
    cap: float,
) -> tuple[float | None, int, int]:
    """Seconds from the first tick after a rewind of `rewind` until every entry was
    published (None past `cap`), the ticks it took and the entries published."""
    namespace = f"backlog-{uuid.uuid4().hex[:10]}"
    app = make_app(queue, entries, namespace)
    scheduler = safebeat.Scheduler(app, store=open_store(pg_url))
    try:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE safebeat_entry SET defined_at = defined_at - %(rewind)s,"
                " anchor = anchor - %(rewind)s, last_window = NULL WHERE namespace = %(ns)s",
                {"rewind": rewind, "ns": namespace},
            )
        published.reset(entries)
        ticks = 0
        started = time.monotonic()
        while published.entries < entries and time.monotonic() - started < cap:
            delay = scheduler.tick()
            ticks += 1
            if delay and delay > 0 and published.entries < entries:
                time.sleep(min(delay, 1.0))
        elapsed = time.monotonic() - started
        done = published.entries >= entries
        return (elapsed if done else None), ticks, published.entries
    finally:
        scheduler.close()
        queue.purge()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=5_000)
    parser.add_argument(
        "--backlogs",
        type=lambda text: [parse_duration(part) for part in text.split(",")],
        default=[timedelta(minutes=2), timedelta(hours=3), timedelta(hours=12)],
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rewind", type=parse_duration, default=timedelta(hours=12))
    parser.add_argument("--cap", type=float, default=90.0, help="seconds per recovery run")
    parser.add_argument("--skip-recovery", action="store_true")
    parser.add_argument(
        "--countings",
        type=lambda text: text.split(","),
        default=list(COUNTINGS),
        help="which countings to time: today, step by step (default both)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"entries": args.entries, "planning": {}, "recovery": {}}
    logging.basicConfig(level=logging.ERROR)

    print(f"planning {args.entries} minutely crontab entries (median of {args.repeats}):")
    for backlog in args.backlogs:
        figures = []
        for kind in args.countings:
            with counting(kind):
                planned = plan_seconds(args.entries, backlog, args.repeats)
                report["planning"].setdefault(kind, {})[str(backlog)] = planned
                figures.append(f"{kind}: {planned:.3f} s")
        print(f"  backlog {backlog}: " + ", ".join(figures))
    if not args.skip_recovery:
        report["recovery"] = recover(args)
        report["rewind"] = str(args.rewind)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")


def recover(args: argparse.Namespace) -> dict[str, Any]:
    """Recovery on PostgreSQL for each counting: seconds (None past the cap), ticks, sent."""
    found: dict[str, Any] = {}
    admin = services.postgres_admin_url()
    database = f"safebeat_bench_backlog_{uuid.uuid4().hex[:8]}"
    pg_url = services.create_database(admin, database)
    queue = BrokerQueue(services.redis_url())
    published = Published()
    try:
        open_store(pg_url).migrate()
        print(f"recovery on PostgreSQL, {args.entries} entries, state rewound {args.rewind}:")
        for kind in args.countings:
            with counting(kind):
                seconds, ticks, sent = recovery_seconds(
                    pg_url, queue, published, entries=args.entries, rewind=args.rewind, cap=args.cap
                )
            figure = f"{seconds:.2f} s" if seconds is not None else f"not done in {args.cap:.0f} s"
            print(f"  {kind}: {figure} ({ticks} ticks, {sent}/{args.entries} entries published)")
            found[kind] = {"seconds": seconds, "ticks": ticks, "sent": sent, "cap": args.cap}
    finally:
        queue.delete()
        services.drop_database(admin, database)
    return found


if __name__ == "__main__":
    main()
