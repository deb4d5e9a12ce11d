"""One process of the scale benchmark (bench_scale.py): a replica, timed phase by phase.

Run as `python tests/benchmarks/scale_child.py '<JSON>'`; it writes `READY <json>` once
its entries are registered and planned once, and `RESULT <json>` when it is done; the
parent reads those lines. Modes (`mode` in the JSON):

- replica: one of K replicas in a burst. `count` entries, all on a daily crontab at
  `due_at` (epoch second, UTC): one window each in the run. Drives tick() like beat's loop
  until the broker queue holds `count` messages; counts what this replica published.
- big: one replica, phase by phase: compile, register, the first pass (every entry planned
  once), an idle tick, then the `due_count` crontab entries due at `due_at` (the rest are
  every hour, never due in the run). With `pulse`, one more entry every second is first
  in the schedule: the restart run's first dispatch.
- idle: one replica with `count` hourly entries, none due, ticking until SIGTERM (the
  parent meters its CPU and store traffic).
- dcb: a django-celery-beat reader (`kind`: safebeat's or django-celery-beat's own
  DatabaseScheduler) over the PeriodicTask rows already in the database: start-up, then
  ticks until the row `watch` shows an interval other than `every` (an edit the parent
  makes through the ORM, as the admin does).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from celery import Celery  # noqa: E402

import safebeat  # noqa: E402
from safebeat.crontab import crontab  # noqa: E402
from safebeat.stores import open_store  # noqa: E402
from tests.benchmarks import peers  # noqa: E402

TASK_NAME = peers.TASK_NAME
HOUR = timedelta(hours=1)
#: Longest sleep of the drive loop: beat's own is the tick's answer; shorter only to notice
#: the end of a burst (an idle tick costs what beat's would).
LOOK_EVERY = 0.5


def daily_at(instant: float) -> crontab:
    at = datetime.fromtimestamp(instant, tz=timezone.utc)
    return crontab(second=at.second, minute=at.minute, hour=at.hour)


def bench_schedule(
    count: int, due_count: int, due_at: float, *, pulse: bool = False
) -> dict[str, Any]:
    """Entry i sends (i,); the first `due_count` fall due at `due_at`, the rest hourly."""
    due = daily_at(due_at)
    schedule: dict[str, Any] = {}
    if pulse:
        schedule["pulse"] = {"task": TASK_NAME, "schedule": timedelta(seconds=1), "args": (-1,)}
    for i in range(count):
        schedule[f"bench-{i:07d}"] = {
            "task": TASK_NAME,
            "schedule": due if i < due_count else HOUR,
            "args": (i,),
        }
    return schedule


def _dispatched(*args: Any) -> None:
    """The task every benchmark entry sends; nothing runs it."""


def bench_app(config: dict[str, Any], schedule: dict[str, Any]) -> Celery:
    app = Celery("safebeat_scale", broker=config["broker"], set_as_current=False)
    app.conf.update(
        timezone="UTC",
        task_default_queue=config["queue"],
        result_expires=None,
        broker_connection_retry_on_startup=True,
        beat_schedule=schedule,
        safebeat_namespace=config.get("namespace", "scale"),
        safebeat_url=config.get("store", "django://"),
    )
    app.task(name=TASK_NAME, shared=False)(_dispatched)
    return app


def peak_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


class Sent:
    """The messages this process published, and when the first and last went: counted from
    what the scheduler's dispatcher reports sent, not from Celery's publish signal. With a
    receiver of that signal connected, safebeat has Celery build every message (as an
    application's receivers need), which a beat without receivers does not."""

    def __init__(self, scheduler: safebeat.Scheduler) -> None:
        self.reset()
        dispatcher = scheduler.dispatcher
        real = dispatcher.settle  # every dispatch ends there, pipelined or not

        def settle(*args: Any, **kwargs: Any) -> Any:
            dispatched = real(*args, **kwargs)
            if dispatched.sent:
                self.count += len(dispatched.sent)
                self.last = time.time()
                self.first = self.first or self.last
            return dispatched

        dispatcher.settle = settle

    def reset(self) -> None:
        self.count = 0
        self.first: float | None = None
        self.last: float | None = None


def say(tag: str, figures: dict[str, Any]) -> None:
    print(f"{tag} {json.dumps(figures)}", flush=True)


def first_pass(scheduler: safebeat.Scheduler) -> tuple[float, int]:
    """Tick until every entry was planned once (the tick asks for a sleep); seconds, ticks."""
    started, ticks = time.monotonic(), 0
    while True:
        ticks += 1
        if scheduler.tick() > 0:
            return time.monotonic() - started, ticks


def warm_producer(app: Celery, scheduler: safebeat.Scheduler, queue: str) -> None:
    """Connect the scheduler's producer before any clock starts (a queue of its own)."""
    app.send_task(TASK_NAME, args=(-2,), producer=scheduler.producer, queue=queue)


def drive_until(scheduler: Any, done: Any, deadline: float) -> None:
    """Call tick() like beat's loop until `done()` or the wall-clock deadline."""
    while not done() and time.time() < deadline:
        interval = scheduler.tick()
        if interval and interval > 0:
            time.sleep(min(interval, LOOK_EVERY))


class ClaimCounts:
    """What this replica's claim rounds asked for and got: windows asked to claim, windows
    claimed, rounds that claimed nothing (every window already another replica's), rounds
    that found the tick lock busy."""

    def __init__(self, engine: Any) -> None:
        self.asked = self.claimed = self.empty_rounds = self.busy_rounds = self.rounds = 0
        claim = engine.claim

        def counted(due: Any, **kwargs: Any) -> Any:
            claimed = claim(due, **kwargs)
            if claimed is None:
                self.busy_rounds += 1
                return None
            self.rounds += 1
            self.asked += len(due)
            self.claimed += len(claimed.claims)
            self.empty_rounds += bool(due) and not claimed.claims
            return claimed

        engine.claim = counted

    def reset(self) -> None:
        self.asked = self.claimed = self.empty_rounds = self.busy_rounds = self.rounds = 0

    def figures(self) -> dict[str, int]:
        return {
            "asked": self.asked,
            "claimed": self.claimed,
            "rounds": self.rounds,
            "empty_rounds": self.empty_rounds,
            "busy_rounds": self.busy_rounds,
        }


def replica(config: dict[str, Any]) -> None:
    count = config["count"]
    app = bench_app(config, bench_schedule(count, count, config["due_at"]))
    scheduler = safebeat.Scheduler(app, store=open_store(config["store"]))
    sent = Sent(scheduler)
    warm_producer(app, scheduler, config["warm_queue"])
    counts = ClaimCounts(scheduler.engine)
    first_pass(scheduler)
    say("READY", {"at": time.time()})
    broker = redis.Redis.from_url(config["broker"])
    # Idle ticks until just before the instant, then the burst's CPU: this process's, all
    # its threads (bench_targets.py sets it beside the raw publisher's per 10,000 windows).
    drive_until(scheduler, lambda: time.time() >= config["due_at"] - LOOK_EVERY, config["due_at"])
    cpu = time.process_time()
    counts.reset()
    drive_until(
        scheduler,
        lambda: broker.llen(config["queue"]) >= count,
        config["due_at"] + config["cap"],
    )
    burst_cpu = time.process_time() - cpu
    # The burst is on the broker; this replica may still have entries to look at (windows
    # the others claimed): until it has none due, for its whole CPU and claim counts.
    due_at = scheduler.engine.pacing.due_at
    drive_until(
        scheduler,
        lambda: (due_at.earliest() or 0.0) > time.monotonic() + 60,
        time.time() + 60,
    )
    figures = {
        "sent": sent.count,
        "first": sent.first,
        "last": sent.last,
        "cpu_seconds": burst_cpu,
        "cpu_until_idle": time.process_time() - cpu,
    }
    scheduler.close()
    figures.update(counts.figures())
    say("RESULT", {**figures, "rss": peak_rss()})


def big(config: dict[str, Any]) -> None:
    count, due_count, due_at = config["count"], config["due_count"], config["due_at"]
    figures: dict[str, Any] = {}
    app = bench_app(config, bench_schedule(count, due_count, due_at, pulse=config["pulse"]))
    scheduler = safebeat.Scheduler(app, store=open_store(config["store"]), lazy=True)
    sent = Sent(scheduler)
    started = time.monotonic()
    scheduler.use_entries(*scheduler._compiled_entries())
    figures["compile"] = time.monotonic() - started
    started = time.monotonic()
    scheduler.engine.bootstrap()
    figures["register"] = time.monotonic() - started
    warm_producer(app, scheduler, config["warm_queue"])
    sent.reset()
    figures["first_pass"], figures["first_pass_ticks"] = first_pass(scheduler)
    figures["first_sent"] = sent.first
    if config["pulse"]:  # the restart run ends at its first dispatch
        drive_until(scheduler, lambda: sent.count > 0, time.time() + 60)
        figures["first_sent"] = sent.first
    else:
        idle_ticks = []
        for _ in range(5):
            time.sleep(0.2)
            started = time.monotonic()
            scheduler.tick()
            idle_ticks.append(time.monotonic() - started)
        figures["idle_tick"] = sorted(idle_ticks)[2]
        say("READY", {"at": time.time()})
        broker = redis.Redis.from_url(config["broker"])
        drive_until(
            scheduler,
            lambda: sent.count >= due_count and broker.llen(config["queue"]) >= due_count,
            due_at + config["cap"],
        )
        figures["burst_sent"] = sent.count
        figures["burst_end"] = time.time()
    figures["rss"] = peak_rss()
    scheduler.close()
    say("RESULT", figures)


def idle(config: dict[str, Any]) -> None:
    app = bench_app(config, bench_schedule(config["count"], 0, 0))
    scheduler = safebeat.Scheduler(app, store=open_store(config["store"]))
    first_pass(scheduler)
    say("READY", {"at": time.time(), "rss": peak_rss()})
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:  # beat's loop
        time.sleep(scheduler.tick())
    scheduler.close()


def dcb(config: dict[str, Any]) -> None:
    peers.configure_django({"default": config["django"]})
    app = bench_app(config, {})
    # Both modules imported before the clocks start: each scheduler is timed from its
    # construction until every row's next window is known (safebeat: every entry
    # registered and planned once; django-celery-beat: its first tick, which reads every
    # row and works out when each is due).
    from django_celery_beat.schedulers import DatabaseScheduler as Stock

    from safebeat.contrib.django import DatabaseScheduler

    started, cpu = time.monotonic(), time.process_time()
    if config["kind"] == peers.DJANGO:
        scheduler: Any = DatabaseScheduler(app)
        first_pass(scheduler)

        def every() -> Any:
            return scheduler.entries[config["watch"]].definition
    else:
        scheduler = Stock(app)
        scheduler.tick()

        def every() -> Any:
            return scheduler._schedule[config["watch"]].schedule.run_every

    figures = {
        "startup": time.monotonic() - started,
        "startup_cpu": time.process_time() - cpu,  # this process's; the database's aside
        "rss_startup": peak_rss(),
    }
    before = every()
    say("READY", {"at": time.time()})
    while every() == before and time.time() < config["deadline"]:
        time.sleep(scheduler.tick())  # beat's loop
    figures.update(seen=time.time() if every() != before else None, rss=peak_rss())
    scheduler.close()
    say("RESULT", figures)


def memory(config: dict[str, Any]) -> None:
    """Where one replica's memory goes after registering `count` hourly entries and planning
    them once: the peak RSS (and the RSS before the scheduler is made), or with `trace`
    tracemalloc's largest allocation sites (the RSS then counts tracemalloc's own)."""
    import tracemalloc

    if config.get("trace"):
        tracemalloc.start()
    app = bench_app(config, bench_schedule(config["count"], 0, 0))
    base_rss = peak_rss()  # Python, Celery, kombu and the app's beat_schedule
    scheduler = safebeat.Scheduler(app, store=open_store(config["store"]))
    first_pass(scheduler)
    figures: dict[str, Any] = {"rss": peak_rss(), "base_rss": base_rss}
    if config.get("trace"):
        top = tracemalloc.take_snapshot().statistics("lineno")[: config.get("top", 15)]
        figures["top"] = [
            f"{stat.size / 2**20:7.1f} MiB {stat.count:9,} {stat.traceback}" for stat in top
        ]
    scheduler.close()
    say("RESULT", figures)


MODES = {"replica": replica, "big": big, "idle": idle, "dcb": dcb, "memory": memory}

if __name__ == "__main__":
    settings = json.loads(sys.argv[1])
    MODES[settings["mode"]](settings)
