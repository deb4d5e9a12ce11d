"""Peer benchmark: safebeat beside stock beat, django-celery-beat, RedBeat and raw publishing.

One command, one run, one Redis broker for every scheduler (a queue of this run's own):

- stock beat (`celery.beat.PersistentScheduler`), django-celery-beat (`DatabaseScheduler`
  on PostgreSQL, through Django), RedBeat (`redbeat.RedBeatScheduler`, on a redis-server
  of its own), safebeat on SQLite, PostgreSQL, Redis (a redis-server of its own) and
  `django://` (PostgreSQL);
- the limit: the same messages published without a scheduler, three ways: `send_task`
  one at a time, `send_task` inside kombu's batched publish (chunks of 500, as safebeat
  publishes), and plain kombu (`producer.publish` of messages built with Celery's
  `app.amqp.as_task_v2`, chunks of 500).

Scenarios (`--scenarios`, default all):

1. burst: N entries (`--sizes`, default 1,000, 10,000 and 100,000, every 5 s) due at one
   instant; seconds from that instant until `LLEN` shows every message on the broker.
   Each run is a fresh child process (this script with `--child`), so its peak RSS
   (VmHWM) is the scheduler's at N entries. A run is stopped at `--cap` seconds and then
   reported as "> cap" with the entries it had published by then. Peers run
   `--peer-repeats` times above 1,000 entries (stock beat takes minutes at 10,000).
2. steady: 1,000 entries on intervals of 2, 5, 10, 15, 30 and 60 s, three `celery beat`
   replicas of each kind for `--steady-seconds`; lag = arrival on the broker (a consumer
   in this process pops the queue) minus the window. safebeat's window is its
   `safebeat_window` header; a peer's is the instant the scheduler held the entry due
   (`last_run_at + run_every`, noted by a thin subclass just before it sends).
3. cost: store round trips and bytes per tick as due entries grow (`--rt-sizes`, 1 to
   100,000) for safebeat on PostgreSQL, Redis and django:// (counted as in
   bench_dispatch.py: a TCP proxy, or the Redis server itself); peak RSS comes from
   the burst; idle: one `celery beat` replica of each kind with 1,000 entries due in an
   hour, for `--idle-seconds`: CPU, store round trips per second (PostgreSQL: a proxy
   per replica; Redis: the commands its server received from the replica), RSS.
4. failover: three replicas, five entries every second; SIGKILL the replica that
   published last; seconds until another replica publishes (safebeat on PostgreSQL and
   Redis; RedBeat with its default lock timeout and with a 5 s one and 1 s loop).

How to run it (from the repository root; needs PostgreSQL and Redis as the tests find
them, see tests/services.py):

    make bench-peers
    .venv/bin/python tests/benchmarks/bench_peers.py --sizes 1000,10000,100000

Output: tables on stdout, JSON (`--json`, default .bench/bench_peers.json) and a plot
(`--plot`, default .bench/bench_peers.png). `--profile [KINDS]` also writes a
pyinstrument profile of those kinds (default: postgres) dispatching 10,000 entries;
`--render JSON` prints the tables and draws the plot of a saved run again. Nothing passes
or fails on a number.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

import celery  # noqa: E402
import kombu  # noqa: E402
import redis  # noqa: E402

import safebeat  # noqa: E402
from safebeat.stores import open_store  # noqa: E402
from safebeat.stores.django.postgres import DjangoPostgresStore  # noqa: E402
from tests import services  # noqa: E402
from tests.benchmarks import bench_dispatch as bd  # noqa: E402
from tests.benchmarks import peers  # noqa: E402
from tests.benchmarks.peers import (  # noqa: E402
    DCB,
    DJANGO,
    POSTGRES,
    REDBEAT,
    REDIS,
    SAFEBEAT_KINDS,
    SQLITE,
    STOCK,
    TASK_NAME,
)

LIMIT_LOOP = "limit: send_task, one by one"
LIMIT_BATCH = "limit: send_task, batched"
LIMIT_KOMBU = "limit: kombu publish, batched"
#: Issue 19: a burst of 10,000 within this factor of the fastest raw publish, on every store.
LIMIT_RATIO = 1.25
LIMITS = {"limit-loop": LIMIT_LOOP, "limit-batch": LIMIT_BATCH, "limit-kombu": LIMIT_KOMBU}
PEERS = (STOCK, DCB, REDBEAT)
BURST_KINDS = {**peers.KINDS, **LIMITS}
STEADY_INTERVALS = [2.0, 5.0, 10.0, 15.0, 30.0, 60.0]
REPLICAS = 3
CHUNK = 500  # as safebeat.Scheduler.publish_chunk
REDBEAT_DEFAULT = "RedBeat, default lock (1,500 s)"
REDBEAT_SHORT = "RedBeat, 5 s lock, 1 s loop"
MIB = 1024 * 1024


# --- the burst, in a child process -----------------------------------------------------


def proc_status(pid: int | str = "self") -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in bytes."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) * 1024
    return found


#: Seconds between an entry's windows in the burst. Long enough that a safebeat replica has
#: registered and warmed up before its first window on a slow machine (with 1 s, the first
#: tick came after the due instant and the burst's time counted start-up), and that the
#: next windows do not fall inside a 10,000-entry burst.
BURST_INTERVAL = 5.0


def child_options(config: dict[str, Any]) -> bd.Options:
    return bd.Options(
        sizes=[config["size"]],
        rt_sizes=[],
        repeats=1,
        stock_repeats=1,
        interval=BURST_INTERVAL,
        stall=config["stall"],
        timeout=config["cap"],
        kinds=[],
        json=Path(),
        postgres_url=None,
        redis_url=None,
    )


def _child_queue(config: dict[str, Any]) -> bd.BrokerQueue:
    queue = bd.BrokerQueue(config["broker"])
    queue.name = config["queue"]
    return queue


def burst_dcb(
    queue: bd.BrokerQueue, published: bd.Published, entries: int, opts: bd.Options
) -> bd.Run:
    """django-celery-beat: N PeriodicTask rows every 5 s, all due at one instant."""
    app = bd.make_app(queue, 0, opts.interval)
    peers.create_dcb_rows(entries, [opts.interval], datetime.now(timezone.utc))
    scheduler = peers.dcb_class()(app)  # reads every enabled row
    try:
        assert len(scheduler.schedule) == entries, len(scheduler.schedule)
        bd.warm_up(app, scheduler, queue, published)
        published.reset(entries)
        due = math.floor(time.time() + 1.0) + 1.0
        last_run_at = datetime.fromtimestamp(due - opts.interval, tz=timezone.utc)
        for entry in scheduler.schedule.values():
            entry.last_run_at = entry.model.last_run_at = last_run_at
        run = bd.drive_burst(
            scheduler, due, entries=entries, published=published, queue=queue, opts=opts
        )
    finally:
        scheduler.close()
        queue.purge()
    return run


def burst_redbeat(
    queue: bd.BrokerQueue, published: bd.Published, entries: int, opts: bd.Options, url: str
) -> bd.Run:
    """RedBeat: N entries every 5 s from beat_schedule, all due at one instant."""
    from redbeat.decoder import RedBeatJSONEncoder
    from redbeat.schedulers import acquire_distributed_beat_lock

    prefix = f"redbeat-bench-{uuid.uuid4().hex[:8]}:"
    app = bd.make_app(
        queue,
        entries,
        opts.interval,
        redbeat_redis_url=url,
        redbeat_key_prefix=prefix,
    )
    client = redis.Redis.from_url(url)
    scheduler = peers.redbeat_class()(app)  # stores every entry in Redis
    try:
        acquire_distributed_beat_lock(sender=SimpleNamespace(scheduler=scheduler))
        bd.warm_up(app, scheduler, queue, published)
        published.reset(entries)
        due = math.floor(time.time() + 1.0 + entries / 20_000) + 1.0
        meta = json.dumps(
            {"last_run_at": datetime.fromtimestamp(due - opts.interval, tz=timezone.utc)},
            cls=RedBeatJSONEncoder,
        )
        names = list(app.conf.beat_schedule)
        for start in range(0, len(names), 5000):
            with client.pipeline(transaction=False) as pipe:
                for name in names[start : start + 5000]:
                    key = prefix + name
                    pipe.hset(key, "meta", meta)
                    pipe.zadd(app.redbeat_conf.schedule_key, {key: due})
                pipe.execute()
        run = bd.drive_burst(
            scheduler, due, entries=entries, published=published, queue=queue, opts=opts
        )
    finally:
        scheduler.close()
        queue.purge()
        client.flushdb()
        client.close()
    return run


def burst_limit(queue: bd.BrokerQueue, entries: int, mode: str, cap: float) -> tuple[bd.Run, float]:
    """Publish N messages like safebeat's (task, args, id, headers) without a scheduler; the
    run, and the CPU seconds of this process from the due instant to the last message."""
    app = bd.make_app(queue, 0, 1.0)
    window = "2026-01-01T00:00:00Z"

    def headers(i: int) -> dict[str, Any]:
        name = f"bench-{i:06d}"
        return {
            "safebeat_entry": name,
            "safebeat_window": window,
            "periodic_task_name": name,
            "celery_beat_task": True,
        }

    with app.producer_or_acquire() as producer:
        app.send_task(TASK_NAME, args=(-1,), producer=producer)  # connect, declare
        queue.purge()
        due = math.floor(time.time() + 1.0) + 1.0
        bd.sleep_until(due)
        cpu = time.process_time()
        if mode == "limit-loop":
            for i in range(entries):
                app.send_task(
                    TASK_NAME,
                    args=(i,),
                    producer=producer,
                    task_id=str(uuid.uuid4()),
                    headers=headers(i),
                )
        elif mode == "limit-batch":
            for start in range(0, entries, CHUNK):
                with producer.batch(max_size=CHUNK + 1):
                    for i in range(start, min(entries, start + CHUNK)):
                        app.send_task(
                            TASK_NAME,
                            args=(i,),
                            producer=producer,
                            task_id=str(uuid.uuid4()),
                            headers=headers(i),
                        )
        else:
            for start in range(0, entries, CHUNK):
                with producer.batch(max_size=CHUNK + 1):
                    for i in range(start, min(entries, start + CHUNK)):
                        message = app.amqp.as_task_v2(str(uuid.uuid4()), TASK_NAME, args=(i,))
                        message.headers.update(headers(i))
                        producer.publish(
                            message.body,
                            exchange="",
                            routing_key=queue.name,
                            headers=message.headers,
                            serializer="json",
                            **message.properties,
                        )
        deadline = due + cap
        while queue.count() < entries and time.time() < deadline:
            time.sleep(0.001)
        ended, cpu = time.time(), time.process_time() - cpu
    count = queue.count()
    queue.purge()
    return bd.Run(
        seconds=ended - due if count >= entries else None,
        ticks=0,
        entries_sent=count,
        messages=count,
        ready_before_due=True,
    ), cpu


def child_burst(config: dict[str, Any]) -> dict[str, Any]:
    """One burst run of one kind in this (child) process; returns its figures."""
    logging.basicConfig(
        filename=config["log"],
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    tally = bd.LogTally()
    logging.getLogger().addHandler(tally)
    kind, size = config["kind"], config["size"]
    queue = _child_queue(config)
    opts = child_options(config)
    if kind in peers.DJANGO_KINDS:
        peers.configure_django({"default": config["pg"]})
    if config.get("profile"):
        _profile_drive(Path(config["profile"]))
    published = bd.Published()
    started, cpu = time.monotonic(), None
    if kind in LIMITS.values():
        mode = next(key for key, label in LIMITS.items() if label == kind)
        run, cpu = burst_limit(queue, size, mode, config["cap"])
    elif kind == STOCK:
        run = bd.timed(lambda: bd.run_stock(queue, published, size, opts), tally)
    elif kind == DCB:
        run = bd.timed(lambda: burst_dcb(queue, published, size, opts), tally)
    elif kind == REDBEAT:
        url = config["redbeat"]
        run = bd.timed(lambda: burst_redbeat(queue, published, size, opts, url), tally)
    else:
        urls = {
            SQLITE: f"sqlite:///{config['folder']}/{uuid.uuid4().hex}.sqlite3",
            POSTGRES: config["pg"],
            REDIS: config["redis_store"],
            DJANGO: "django://",
        }
        url = urls[kind]
        run = bd.timed(
            lambda: bd.run_safebeat(queue, published, size, opts, lambda: open_store(url)),
            tally,
        )
    status = proc_status()
    return {
        **asdict(run),
        # The scheduler's peak, before the run read back its verification data; a limit
        # row (no drive) reports its process's.
        "rss_peak_bytes": run.peak_rss_bytes or status.get("VmHWM"),
        "rss_bytes": status.get("VmRSS"),
        "child_seconds": time.monotonic() - started,
        # The limit's publish, or the scheduler's whole drive (idle ticks before due too).
        "cpu_seconds": run.cpu_seconds if cpu is None else cpu,
    }


def _profile_drive(path: Path) -> None:
    """Profile every drive() of this process with pyinstrument; write the text to `path`."""
    from pyinstrument import Profiler

    original = bd.drive

    def profiled(*args: Any, **kwargs: Any) -> bd.Drive:
        profiler = Profiler(interval=0.0005)
        profiler.start()
        try:
            return original(*args, **kwargs)
        finally:
            profiler.stop()
            for target, show_all in ((path, False), (path.with_suffix(".full.txt"), True)):
                target.write_text(
                    profiler.output_text(unicode=False, color=False, show_all=show_all),
                    encoding="utf-8",
                )

    bd.drive = profiled


# --- the services of one run --------------------------------------------------------------


@dataclass
class Env:
    """Servers, databases and folders of this run."""

    queue: bd.BrokerQueue
    admin_url: str
    database: str
    pg_url: str
    store_server: bd.RedisStoreServer
    redbeat_server: services.RedisServer
    django_proxy: bd.RoundTripProxy
    folder: Path
    log: Path
    consumer_client: Any = None

    def close(self) -> None:
        self.queue.delete()
        self.django_proxy.close()
        from django.db import connections

        connections.close_all()
        services.drop_database(self.admin_url, self.database)
        self.store_server.stop()
        self.redbeat_server.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def pg_parts(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 5432


def open_env(opts: Options) -> Env:
    queue = bd.BrokerQueue(opts.redis_url or services.redis_url())
    admin_url = opts.postgres_url or services.postgres_admin_url()
    database = f"safebeat_bench_{uuid.uuid4().hex[:8]}"
    pg_url = services.create_database(admin_url, database)
    store_server = bd.RedisStoreServer()
    redbeat_server = services.start_redis_server()
    proxy = bd.RoundTripProxy(*pg_parts(pg_url))
    peers.configure_django({"default": pg_url, "metered": bd.via_proxy(pg_url, proxy.port)})
    from tests import djangosite

    djangosite.migrate("default")
    folder = Path(tempfile.mkdtemp(prefix="safebeat-bench-peers-"))
    return Env(
        queue, admin_url, database, pg_url, store_server, redbeat_server, proxy, folder, opts.log
    )


# --- scenario 1: burst ---------------------------------------------------------------------


def run_child(env: Env, kind: str, size: int, opts: Options, profile: Path | None = None) -> dict:
    config = {
        "kind": kind,
        "size": size,
        "cap": opts.cap,
        "stall": opts.stall,
        "broker": env.queue.url,
        "queue": env.queue.name,
        "pg": env.pg_url,
        "redis_store": env.store_server.url,
        "redbeat": env.redbeat_server.url,
        "folder": str(env.folder),
        "log": str(env.log),
        "profile": str(profile) if profile else None,
    }
    # Set-up (registering N entries) is not timed; allow it generously.
    limit = opts.cap + 120 + size / 100
    try:
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(config)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=limit,
            check=False,
        )
    except subprocess.TimeoutExpired:
        env.queue.purge()
        return {"seconds": None, "entries_sent": 0, "error": f"killed after {limit:.0f} s"}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line.removeprefix("RESULT ")))
    env.queue.purge()
    tail = (done.stderr or "").strip().splitlines()[-3:]
    return {"seconds": None, "entries_sent": 0, "error": " | ".join(tail) or "no result"}


def beyond_cap(runs: dict[tuple[int, str], list[dict]], kind: str, size: int, cap: float) -> str:
    """Why a run of `kind` at `size` would only hit the cap, judged from smaller sizes ("" if
    it might not): a smaller size already went over it, or its time there scaled linearly
    (a lower bound for schedulers whose work per message grows with N) exceeds it."""
    for (done_size, done_kind), done in runs.items():
        if done_kind != kind or done_size >= size:
            continue
        times = [r.get("seconds") for r in done]
        if any(t is None for t in times):
            return f"over the cap at {done_size:,} entries already"
        if times and statistics.median(times) * size / done_size > cap:
            return (
                f"{statistics.median(times):.1f} s at {done_size:,} entries; scaled linearly "
                f"to {size:,}: {statistics.median(times) * size / done_size:,.0f} s"
            )
    return ""


def burst(env: Env, opts: Options) -> list[dict[str, Any]]:
    runs: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for size in opts.sizes:
        for repeat in range(1, opts.repeats + 1):
            for kind in opts.burst_kinds:
                peer = kind in PEERS
                if peer and size > 1000 and repeat > opts.peer_repeats:
                    continue
                if size >= 100_000 and repeat > opts.big_repeats:
                    continue
                reason = beyond_cap(runs, kind, size, opts.cap) if peer else ""
                if reason:
                    runs.setdefault((size, kind), []).append(
                        {"seconds": None, "entries_sent": 0, "not_run": reason}
                    )
                    bd.progress(f"  burst {size:,} {kind}: not run, > cap ({reason})")
                    continue
                run = run_child(env, kind, size, opts)
                runs.setdefault((size, kind), []).append(run)
                seconds = run.get("seconds")
                outcome = (
                    f"{seconds:.3f} s"
                    if seconds is not None
                    else f"> cap: {run.get('entries_sent', 0):,} of {size:,} sent"
                    + (f" ({run['error']})" if run.get("error") else "")
                )
                rss = run.get("rss_peak_bytes")
                bd.progress(
                    f"  burst {size:,} {kind} run {repeat}: {outcome}"
                    + (f", peak RSS {rss / MIB:.0f} MiB" if rss else "")
                )
    return [summarize_burst(size, kind, r, opts.cap) for (size, kind), r in runs.items()]


def summarize_burst(size: int, kind: str, runs: list[dict], cap: float) -> dict[str, Any]:
    completed = [r["seconds"] for r in runs if r.get("seconds") is not None]
    capped = len(completed) < len(runs)
    seconds = statistics.median(completed) if completed and not capped else None
    sent_by_cap = max((r.get("entries_sent", 0) for r in runs), default=0)
    peaks = [r["rss_peak_bytes"] for r in runs if r.get("rss_peak_bytes")]
    return {
        "entries": size,
        "scheduler": kind,
        "runs": runs,
        "completed_runs": len(completed),
        "median_seconds": seconds,
        "over_cap": capped,
        "cap": cap,
        "messages_per_second": size / seconds if seconds else None,
        "entries_sent_by_cap": sent_by_cap if capped else None,
        "upper_bound_messages_per_second": sent_by_cap / cap if capped else None,
        "rss_peak_bytes": statistics.median(peaks) if peaks else None,
    }


def limit_seconds(summaries: list[dict[str, Any]], size: int) -> float | None:
    found = [
        s["median_seconds"]
        for s in summaries
        if s["entries"] == size and s["scheduler"] in LIMITS.values() and s["median_seconds"]
    ]
    return min(found) if found else None


def burst_table(summaries: list[dict[str, Any]], opts: Options) -> str:
    rows = []
    for s in summaries:
        size = s["entries"]
        stock = next(
            (x for x in summaries if x["entries"] == size and x["scheduler"] == STOCK), None
        )
        limit = limit_seconds(summaries, size)
        seconds = s["median_seconds"]
        if seconds is not None:
            shown, rate = f"{seconds:.3f}", f"{size / seconds:,.0f}"
        else:
            shown = f"> {opts.cap:.0f}"
            sent = s["entries_sent_by_cap"]
            rate = f"< {sent / opts.cap:,.0f}" if sent else "-"
        vs_stock = "-"
        if stock is not None and seconds is not None:
            if stock["median_seconds"]:
                vs_stock = f"{stock['median_seconds'] / seconds:,.2f}x"
            elif stock["over_cap"]:
                vs_stock = f"> {opts.cap / seconds:,.2f}x"
        vs_limit = f"{seconds / limit:,.2f}" if seconds and limit else "-"
        s["rate_vs_stock"] = vs_stock
        s["time_vs_limit"] = seconds / limit if seconds and limit else None
        rss = s["rss_peak_bytes"]
        rows.append(
            [
                f"{size:,}",
                s["scheduler"],
                shown,
                rate,
                f"{s['completed_runs']} of {len(s['runs'])}",
                vs_stock,
                vs_limit,
                f"{rss / MIB:,.0f}" if rss else "-",
            ]
        )
    headers = [
        "entries",
        "scheduler",
        "seconds",
        "messages/s",
        "runs done",
        "rate vs stock",
        "time vs limit",
        "peak RSS MiB",
    ]
    title = (
        f"1. Burst: N entries due at one instant -> all on the broker (median of "
        f"{opts.repeats} runs; peers {opts.peer_repeats} above 1,000, all {opts.big_repeats} at "
        f"100,000; cap {opts.cap:.0f} s)\n"
        "(rate vs stock: stock beat's time / this time; time vs limit: this time / the "
        "fastest limit row's)"
    )
    notes = [
        f"  {s['scheduler']}, {s['entries']:,}: not run, {r['not_run']}"
        for s in summaries
        for r in s["runs"]
        if r.get("not_run")
    ]
    return f"{title}\n{bd.table(headers, rows)}" + "".join("\n" + n for n in notes)


# --- beat replicas as processes -----------------------------------------------------------


class Consumer:
    """Pops the benchmark queue in a thread and notes when each task id arrived."""

    def __init__(self, queue: bd.BrokerQueue) -> None:
        self.queue = queue
        self.arrivals: dict[str, float] = {}
        self.messages = 0
        self._stop = threading.Event()
        self._client = redis.Redis.from_url(queue.url)
        self._thread = threading.Thread(target=self._run, name="bench-consumer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            found = self._client.blpop([self.queue.name], timeout=0.2)
            if not found:
                continue
            arrived = time.time()
            self.messages += 1
            try:
                task_id = json.loads(found[1])["headers"]["id"]
            except (ValueError, KeyError, TypeError):
                continue
            self.arrivals.setdefault(task_id, arrived)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._client.close()


@dataclass
class Replica:
    process: subprocess.Popen[bytes]
    record: Path

    @property
    def pid(self) -> int:
        return self.process.pid


def beat_config(env: Env, kind: str, count: int, intervals: list[float], **extra: Any) -> dict:
    config: dict[str, Any] = {
        "kind": kind,
        "broker": env.queue.url,
        "queue": env.queue.name,
        "count": count,
        "intervals": intervals,
        "django": env.pg_url,
    }
    run = uuid.uuid4().hex[:8]
    if kind == SQLITE:
        config["store"] = f"sqlite:///{env.folder}/steady-{run}.sqlite3"
    elif kind == POSTGRES:
        config["store"] = env.pg_url
    elif kind == REDIS:
        config["store"] = env.store_server.url
    elif kind == DJANGO:
        config["store"] = "django://"
    config["namespace"] = f"bench-{run}"
    config["redbeat_url"] = env.redbeat_server.url
    config["redbeat_prefix"] = f"redbeat-bench-{run}:"
    config.update(extra)
    return config


def start_replica(env: Env, config: dict[str, Any], tag: str) -> Replica:
    record = env.folder / f"{tag}.records"
    config = {**config, "record": str(record)}
    environ = {**os.environ, "SAFEBEAT_BENCH_BEAT": json.dumps(config), "PYTHONPATH": str(ROOT)}
    log = (env.folder / f"{tag}.log").open("ab")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.benchmarks.beat_app",
            "beat",
            "-S",
            peers.scheduler_path(config["kind"]),
            "-s",
            str(env.folder / f"{tag}-celerybeat-schedule"),
            "--loglevel",
            "WARNING",
        ],
        cwd=ROOT,
        env=environ,
        stdout=log,
        stderr=log,
    )
    log.close()
    return Replica(process, record)


def stop_replicas(replicas: Sequence[Replica]) -> None:
    for replica in replicas:
        if replica.process.poll() is None:
            replica.process.terminate()
    for replica in replicas:
        try:
            replica.process.wait(15)
        except subprocess.TimeoutExpired:
            replica.process.kill()
            replica.process.wait(5)


def prepare_peer_state(env: Env, kind: str, count: int, intervals: list[float]) -> None:
    """Rows for django-celery-beat; an empty RedBeat server."""
    if kind == DCB:
        peers.create_dcb_rows(count, intervals, datetime.now(timezone.utc))
    if kind == REDBEAT:
        client = redis.Redis.from_url(env.redbeat_server.url)
        client.flushall()
        client.close()


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


# --- scenario 2: steady ----------------------------------------------------------------------


def steady(env: Env, kind: str, opts: Options) -> dict[str, Any]:
    count, intervals = opts.steady_entries, STEADY_INTERVALS
    prepare_peer_state(env, kind, count, intervals)
    env.queue.purge()
    consumer = Consumer(env.queue)
    config = beat_config(env, kind, count, intervals)
    tag = f"steady-{uuid.uuid4().hex[:6]}"
    launched = time.time()
    replicas = [start_replica(env, config, f"{tag}-{i}") for i in range(REPLICAS)]
    start, end = launched + opts.steady_warmup, launched + opts.steady_warmup + opts.steady_seconds
    try:
        bd.sleep_until(end + 5.0)
    finally:
        stop_replicas(replicas)
        time.sleep(0.5)
        consumer.stop()
    records = peers.read_records([r.record for r in replicas])
    lags, unseen, ids = [], 0, set()
    for task_id, _pid, _published, due in records:
        if due is None or not start <= due < end:
            continue
        ids.add(task_id)
        arrived = consumer.arrivals.get(task_id)
        if arrived is None:
            unseen += 1
            continue
        lags.append(arrived - due)
    # Windows on a grid of `every` in a span of D seconds: D / every on average (exact when
    # D is a multiple of every interval, as 60 s is of 2, 5, 10, 15, 30 and 60).
    windows = round(
        sum(opts.steady_seconds / every for every in peers.entry_intervals(count, intervals))
    )
    env.queue.purge()
    result = {
        "scheduler": kind,
        "entries": count,
        "replicas": REPLICAS,
        "seconds": opts.steady_seconds,
        "messages": len(lags) + unseen,
        "windows_due": windows,
        "unseen": unseen,
        "distinct_task_ids": len(ids),
        "replicas_exited": [r.process.returncode for r in replicas],
    }
    if lags:
        result.update(
            lag_p50=percentile(lags, 0.50),
            lag_p99=percentile(lags, 0.99),
            lag_max=max(lags),
            lag_min=min(lags),
        )
    bd.progress(
        f"  steady {kind}: {result['messages']:,} messages for ~{windows:,} windows, "
        + (
            f"lag p50 {result['lag_p50'] * 1000:.0f} ms, p99 {result['lag_p99'] * 1000:.0f} ms"
            if lags
            else "no lag measured"
        )
    )
    return result


def steady_table(results: list[dict[str, Any]], opts: Options) -> str:
    rows = []
    for r in results:
        lagged = "lag_p50" in r
        rows.append(
            [
                r["scheduler"],
                f"{r['messages']:,}",
                f"{r['windows_due']:,}",
                f"{r['messages'] / r['windows_due']:.2f}" if r["windows_due"] else "-",
                f"{r['lag_p50'] * 1000:,.0f}" if lagged else "-",
                f"{r['lag_p99'] * 1000:,.0f}" if lagged else "-",
                f"{r['lag_max'] * 1000:,.0f}" if lagged else "-",
            ]
        )
    headers = [
        "scheduler",
        "messages",
        "windows due",
        "messages/window",
        "lag p50 ms",
        "p99 ms",
        "max ms",
    ]
    title = (
        f"2. Steady: {opts.steady_entries:,} entries every 2-60 s, {REPLICAS} replicas, "
        f"{opts.steady_seconds:.0f} s (lag = on the broker - window; a peer's window is "
        "its own last_run_at + interval)"
    )
    return f"{title}\n{bd.table(headers, rows)}"


# --- scenario 3: cost growth and the idle replica -------------------------------------------


class MeteredDjangoStore(bd.MeteredStore, DjangoPostgresStore):
    """A django:// store on a PostgreSQL alias that goes through the round-trip proxy."""

    def __init__(self, url: str, proxy: bd.RoundTripProxy) -> None:
        super().__init__(url)
        self.meter = bd.ProxyMeter(proxy)
        self.calls = []


def cost(env: Env, opts: Options) -> dict[str, list[dict[str, Any]]]:
    dopts = bd.Options(
        sizes=[],
        rt_sizes=opts.rt_sizes,
        repeats=1,
        stock_repeats=1,
        interval=1.0,
        stall=opts.stall,
        timeout=opts.cap * 4,
        kinds=[],
        json=Path(),
        postgres_url=None,
        redis_url=None,
    )
    published = bd.Published()
    found: dict[str, list[bd.RoundTrips]] = {POSTGRES: [], REDIS: [], DJANGO: []}
    proxy = bd.RoundTripProxy(*pg_parts(env.pg_url))
    meter = bd.RedisCommandMeter(env.store_server.url)
    try:
        for size in opts.rt_sizes:
            stores: dict[str, Callable[[], bd.MeteredStore]] = {
                POSTGRES: lambda: bd.MeteredPostgresStore(
                    bd.via_proxy(env.pg_url, proxy.port), proxy
                ),
                REDIS: lambda: bd.MeteredRedisStore(env.store_server.url, meter),
                DJANGO: lambda: MeteredDjangoStore("django://metered", env.django_proxy),
            }
            for kind, make in stores.items():
                found[kind].append(
                    bd.measure_round_trips(make(), env.queue, published, entries=size, opts=dopts)
                )
                claims = found[kind][-1].claim_ticks
                bd.progress(
                    f"  round trips {kind}, {size:,} due: "
                    f"{bd.spread([c.traffic.round_trips for c in claims]) if claims else '-'}"
                    " per claim tick"
                )
    finally:
        proxy.close()
        meter.close()
    return {kind: [bd.round_trip_json(r) for r in results] for kind, results in found.items()}


def cost_tables(found: dict[str, list[dict[str, Any]]]) -> str:
    rows = []
    for kind, results in found.items():
        for r in results:
            claims, confirms, idle = r["claim_ticks"], r["confirms"], r["idle_tick"]
            rt = sorted({c["round_trips"] for c in claims})
            rows.append(
                [
                    kind,
                    f"{r['due']:,}",
                    f"{idle['round_trips']}" if idle else "-",
                    f"{len(claims)} x {bd.spread([c['claimed'] for c in claims])}"
                    if claims
                    else "-",
                    bd.spread(rt) if rt else "-",
                    bd.kib(max(c["bytes_sent"] for c in claims)) if claims else "-",
                    bd.kib(max(c.get("bytes_received", 0) for c in claims)) if claims else "-",
                    bd.ms(max(c["seconds"] for c in claims)) if claims else "-",
                    bd.spread([c["round_trips"] for c in confirms]) if confirms else "-",
                ]
            )
    headers = [
        "store",
        "due",
        "idle tick RT",
        "claim ticks x windows",
        "RT/claim tick",
        "KiB sent",
        "KiB recv",
        "ms",
        "RT/confirm",
    ]
    title = (
        "3a. Cost growth: store round trips (RT) per tick as due entries grow (PostgreSQL "
        "and django://: a TCP proxy;\nRedis: commands received by its server, less those "
        "its scripts ran; bytes and ms: the largest claim tick; Redis counts no KiB recv)"
    )
    return f"{title}\n{bd.table(headers, rows)}"


def rss_table(summaries: list[dict[str, Any]], sizes: Sequence[int]) -> str:
    kinds = list(dict.fromkeys(s["scheduler"] for s in summaries))
    rows = []
    for kind in kinds:
        row = [kind]
        for size in sizes:
            s = next(
                (x for x in summaries if x["scheduler"] == kind and x["entries"] == size), None
            )
            rss = s and s["rss_peak_bytes"]
            row.append(f"{rss / MIB:,.0f}" if rss else "-")
        rows.append(row)
    title = (
        "3b. Peak RSS (MiB, VmHWM) of the process that dispatched the burst, by entries "
        "(includes this benchmark's bookkeeping)"
    )
    return f"{title}\n{bd.table(['scheduler', *[f'{s:,}' for s in sizes]], rows)}"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle(env: Env, opts: Options) -> list[dict[str, Any]]:
    """One replica of each kind, 1,000 entries due in an hour, all at once; CPU and queries."""
    count, intervals = 1000, [3600.0]
    prepare_peer_state(env, DCB, count, intervals)
    prepare_peer_state(env, REDBEAT, count, intervals)
    proxies: dict[str, bd.RoundTripProxy] = {}
    replicas: dict[str, Replica] = {}
    meters: dict[str, bd.RedisCommandMeter] = {}
    try:
        for kind in opts.idle_kinds:
            extra: dict[str, Any] = {}
            if kind in (POSTGRES, DCB, DJANGO):
                proxies[kind] = bd.RoundTripProxy(*pg_parts(env.pg_url))
                via = bd.via_proxy(env.pg_url, proxies[kind].port)
                extra = {"store": via} if kind == POSTGRES else {"django": via}
            config = beat_config(env, kind, count, intervals)
            config.update(extra)
            replicas[kind] = start_replica(env, config, f"idle-{uuid.uuid4().hex[:6]}")
        time.sleep(opts.idle_warmup)
        for kind, url in ((REDIS, env.store_server.url), (REDBEAT, env.redbeat_server.url)):
            if kind in replicas:
                meters[kind] = bd.RedisCommandMeter(url)
                meters[kind].start()
        before_cpu = {k: cpu_seconds(r.pid) for k, r in replicas.items()}
        before_rt = {k: p.traffic() for k, p in proxies.items()}
        started = time.monotonic()
        time.sleep(opts.idle_seconds)
        elapsed = time.monotonic() - started
        after_cpu = {k: cpu_seconds(r.pid) for k, r in replicas.items()}
        traffic = {k: p.traffic() - before_rt[k] for k, p in proxies.items()}
        readings = {k: m.stop() for k, m in meters.items()}
        rss = {k: proc_status(r.pid).get("VmRSS") for k, r in replicas.items()}
    finally:
        stop_replicas(list(replicas.values()))
        for proxy in proxies.values():
            proxy.close()
        for meter in meters.values():
            meter.close()
    results = []
    for kind in replicas:
        round_trips: float | None = None
        if kind in traffic:
            round_trips = traffic[kind].round_trips
        elif kind in readings:
            round_trips = readings[kind].traffic.round_trips
        results.append(
            {
                "scheduler": kind,
                "seconds": elapsed,
                "cpu_seconds": after_cpu[kind] - before_cpu[kind],
                "cpu_percent": 100 * (after_cpu[kind] - before_cpu[kind]) / elapsed,
                "store_round_trips": round_trips,
                "store_round_trips_per_second": (
                    round_trips / elapsed if round_trips is not None else None
                ),
                "store_commands": readings[kind].commands if kind in readings else None,
                "rss_bytes": rss[kind],
            }
        )
        bd.progress(f"  idle {kind}: {results[-1]['cpu_percent']:.2f}% CPU")
    return results


def idle_table(results: list[dict[str, Any]], opts: Options) -> str:
    rows = []
    for r in results:
        per_second = r["store_round_trips_per_second"]
        rows.append(
            [
                r["scheduler"],
                f"{r['cpu_percent']:.2f}",
                f"{per_second:.2f}" if per_second is not None else "n/a",
                f"{r['rss_bytes'] / MIB:,.0f}" if r["rss_bytes"] else "-",
            ]
        )
    title = (
        f"3c. An idle replica (celery beat, 1,000 entries due in an hour) over "
        f"{opts.idle_seconds:.0f} s: CPU, store round trips per second, RSS\n(n/a: the "
        "store has no server to count at: a file)"
    )
    headers = ["scheduler", "CPU %", "store RT/s", "RSS MiB"]
    return f"{title}\n{bd.table(headers, rows)}"


# --- scenario 4: failover ------------------------------------------------------------------


def failover_once(env: Env, label: str, kind: str, opts: Options, **extra: Any) -> dict:
    prepare_peer_state(env, kind, 5, [1.0])
    env.queue.purge()
    consumer = Consumer(env.queue)
    config = beat_config(env, kind, 5, [1.0], **extra)
    tag = f"failover-{uuid.uuid4().hex[:6]}"
    replicas = [start_replica(env, config, f"{tag}-{i}") for i in range(REPLICAS)]
    result: dict[str, Any] = {"scheduler": label, "cap": opts.failover_cap}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            records = peers.read_records([r.record for r in replicas])
            if records and time.time() - min(r[2] for r in records) > opts.failover_warmup:
                break
            time.sleep(0.2)
        else:
            result["error"] = "no message within 60 s of starting"
            return result
        last = max(records, key=lambda r: r[2])
        victim = next(r for r in replicas if r.pid == last[1])
        os.kill(victim.pid, signal.SIGKILL)
        killed = time.time()
        victim.process.wait(5)
        result.update(killed_pid=victim.pid, last_publish_before_kill=killed - last[2])
        deadline = time.monotonic() + opts.failover_cap
        while time.monotonic() < deadline:
            after = [
                r
                for r in peers.read_records([x.record for x in replicas if x is not victim])
                if r[2] > killed
            ]
            if after:
                first = min(after, key=lambda r: r[2])
                time.sleep(0.3)
                arrived = consumer.arrivals.get(first[0], first[2])
                result.update(
                    seconds=arrived - killed,
                    window_lag=arrived - first[3] if first[3] is not None else None,
                    taken_over_by=first[1],
                )
                break
            time.sleep(0.02)
        else:
            result["seconds"] = None
    finally:
        stop_replicas(replicas)
        consumer.stop()
        env.queue.purge()
    return result


def failover(env: Env, opts: Options) -> list[dict[str, Any]]:
    cases: list[tuple[str, str, dict[str, Any], int]] = [
        (POSTGRES, POSTGRES, {}, opts.failover_repeats),
        (REDIS, REDIS, {}, opts.failover_repeats),
        (REDBEAT_SHORT, REDBEAT, {"redbeat_lock_timeout": 5, "max_loop_interval": 1}, 3),
        (REDBEAT_DEFAULT, REDBEAT, {}, 1),
    ]
    results = []
    for label, kind, extra, repeats in cases:
        runs = []
        for _ in range(repeats):
            run = failover_once(env, label, kind, opts, **extra)
            runs.append(run)
            seconds = run.get("seconds")
            bd.progress(
                f"  failover {label}: "
                + (f"{seconds:.3f} s" if seconds is not None else f"> {opts.failover_cap:.0f} s")
                + (f" ({run['error']})" if run.get("error") else "")
            )
        done = [r["seconds"] for r in runs if r.get("seconds") is not None]
        results.append(
            {
                "scheduler": label,
                "runs": runs,
                "cap": opts.failover_cap,
                "median_seconds": statistics.median(done) if len(done) == len(runs) else None,
                "max_seconds": max(done) if len(done) == len(runs) else None,
            }
        )
    return results


def failover_table(results: list[dict[str, Any]], opts: Options) -> str:
    rows = []
    for r in results:
        runs = r["runs"]
        lags = [x["window_lag"] for x in runs if x.get("window_lag") is not None]
        rows.append(
            [
                r["scheduler"],
                str(len(runs)),
                f"{r['median_seconds']:.3f}"
                if r["median_seconds"] is not None
                else f"> {r['cap']:.0f}",
                f"{r['max_seconds']:.3f}" if r["max_seconds"] is not None else f"> {r['cap']:.0f}",
                f"{statistics.median(lags):.3f}" if lags else "-",
            ]
        )
    title = (
        f"4. Failover: {REPLICAS} replicas, 5 entries every 1 s; SIGKILL the replica that "
        "published last -> the next message another replica publishes (seconds; "
        f"cap {opts.failover_cap:.0f} s)\n(window lag: that message's arrival - its window)"
    )
    headers = ["scheduler", "runs", "median s", "max s", "its window lag s"]
    return f"{title}\n{bd.table(headers, rows)}"


# --- targets and the plot ------------------------------------------------------------------


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    summaries = report.get("burst", [])

    def pick(kind: str, size: int) -> dict[str, Any] | None:
        return next((s for s in summaries if s["scheduler"] == kind and s["entries"] == size), None)

    for size in sorted({s["entries"] for s in summaries}):
        ours = pick(POSTGRES, size)
        for peer, name, wanted in ((STOCK, "stock beat", 1.0), (DCB, "django-celery-beat", 10.0)):
            theirs = pick(peer, size)
            if not (ours and ours["median_seconds"] and theirs):
                continue
            met: bool | None
            if theirs["median_seconds"]:
                ratio = theirs["median_seconds"] / ours["median_seconds"]
                figure, met = f"{ratio:,.2f}x", ratio >= wanted
            else:  # over the cap: the ratio is a lower bound
                ratio = theirs["cap"] / ours["median_seconds"]
                figure = f"> {ratio:,.2f}x ({name} over the {theirs['cap']:.0f} s cap)"
                if all(r.get("not_run") for r in theirs["runs"]):
                    figure = f"> {ratio:,.2f}x ({name} not run: scaled past the cap)"
                met = True if ratio >= wanted else None
            found.append(
                {
                    "target": f"burst rate vs {name} at {size:,} >= {wanted:g}x",
                    "figure": figure,
                    "met": met,
                }
            )
    limit = limit_seconds(summaries, 10_000)
    for kind in SAFEBEAT_KINDS:
        ours = pick(kind, 10_000)
        if ours and ours["median_seconds"] and limit:
            ratio = ours["median_seconds"] / limit
            found.append(
                {
                    "target": f"{kind}: time at 10,000 within {LIMIT_RATIO:g}x of the "
                    "fastest raw publish",
                    "figure": f"{ratio:.2f}x ({ours['median_seconds']:.3f} s vs {limit:.3f} s)",
                    "met": ratio <= LIMIT_RATIO,
                }
            )
    for kind, results in report.get("cost", {}).items():
        rts = sorted({c["round_trips"] for r in results for c in r["claim_ticks"]})
        if rts:
            found.append(
                {
                    "target": f"{kind}: round trips per claim tick independent of due entries",
                    "figure": f"{bd.spread(rts)} from {results[0]['due']:,} to "
                    f"{results[-1]['due']:,} due",
                    "met": len(rts) == 1,
                }
            )
    for r in report.get("failover", []):
        if r["scheduler"] in (POSTGRES, REDIS):
            worst = r["max_seconds"]
            found.append(
                {
                    "target": f"{r['scheduler']}: failover <= 2 s (worst of {len(r['runs'])})",
                    "figure": f"{worst:.3f} s" if worst is not None else f"> {r['cap']:.0f} s",
                    "met": worst is not None and worst <= 2.0,
                }
            )
    for kind in SAFEBEAT_KINDS:
        s = pick(kind, 100_000)
        if s and s["rss_peak_bytes"]:
            mib = s["rss_peak_bytes"] / MIB
            found.append(
                {
                    "target": f"{kind}: peak RSS <= 300 MB at 100,000 entries",
                    "figure": f"{s['rss_peak_bytes'] / 1e6:,.0f} MB ({mib:,.0f} MiB)",
                    "met": s["rss_peak_bytes"] <= 300e6,
                }
            )
    return found


def targets_table(found: list[dict[str, Any]]) -> str:
    verdicts = {True: "met", False: "MISSED", None: "open (lower bound only)"}
    rows = [[t["target"], t["figure"], verdicts[t["met"]]] for t in found]
    return "Targets (same run)\n" + bd.table(["target", "figure", ""], rows)


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9.5))
    summaries = report.get("burst", [])
    kinds = list(dict.fromkeys(s["scheduler"] for s in summaries))
    ax = axes[0][0]
    for kind in kinds:
        points = [
            (s["entries"], s["messages_per_second"] or s["upper_bound_messages_per_second"])
            for s in summaries
            if s["scheduler"] == kind
            and (s["messages_per_second"] or s["upper_bound_messages_per_second"])
        ]
        if not points:
            continue
        style = ":" if kind in LIMITS.values() else "-"
        ax.plot(*zip(*points, strict=True), style, marker="o", label=kind)
        for s in summaries:
            if s["scheduler"] == kind and s["over_cap"] and s["upper_bound_messages_per_second"]:
                ax.annotate(
                    "cap",
                    (s["entries"], s["upper_bound_messages_per_second"] or 1),
                    fontsize=7,
                )
    ax.set(xscale="log", yscale="log", xlabel="entries due at one instant")
    ax.set(ylabel="messages/s (at the cap: an upper bound)", title="1. Burst: dispatch rate")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)

    ax = axes[0][1]
    for kind in kinds:
        if kind in LIMITS.values():
            continue
        points = [
            (s["entries"], s["rss_peak_bytes"] / MIB)
            for s in summaries
            if s["scheduler"] == kind and s["rss_peak_bytes"]
        ]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=kind)
    ax.axhline(300e6 / MIB, color="grey", linestyle="--", linewidth=1, label="300 MB target")
    ax.set(xscale="log", xlabel="entries", ylabel="peak RSS (MiB)", title="3. Peak RSS")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)

    ax = axes[1][0]
    for kind, results in report.get("cost", {}).items():
        points = [
            (r["due"], max(c["round_trips"] for c in r["claim_ticks"]))
            for r in results
            if r["claim_ticks"]
        ]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=kind)
    ax.set(xscale="log", xlabel="due entries", ylabel="round trips per claiming tick")
    ax.set(title="3. Store round trips per tick", ylim=(0, None))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)

    ax = axes[1][1]
    labels, values, capped = [], [], []
    for r in report.get("failover", []):
        labels.append(r["scheduler"])
        values.append(r["median_seconds"] if r["median_seconds"] is not None else r["cap"])
        capped.append(r["median_seconds"] is None)
    if labels:
        bars = ax.barh(labels, values, color=["grey" if c else "C0" for c in capped])
        for bar, is_capped in zip(bars, capped, strict=True):
            text = f"> {bar.get_width():.0f} s (cap)" if is_capped else f"{bar.get_width():.2f} s"
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, " " + text, va="center")
        ax.set(xscale="log", xlabel="seconds from SIGKILL to the next dispatch (median)")
        ax.set(title="4. Failover")
    fig.suptitle(
        f"safebeat beside its peers, one run ({report['environment']['cpus']} CPUs, "
        f"load {report['environment']['loadavg_at_start']})"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


# --- main ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    scenarios: list[str]
    sizes: list[int]
    rt_sizes: list[int]
    repeats: int
    peer_repeats: int
    big_repeats: int
    cap: float
    stall: float
    burst_kinds: list[str]
    idle_kinds: list[str]
    steady_kinds: list[str]
    steady_entries: int
    steady_seconds: float
    steady_warmup: float
    idle_seconds: float
    idle_warmup: float
    failover_repeats: int
    failover_cap: float
    failover_warmup: float
    json: Path
    plot: Path
    log: Path
    render: Path | None
    profile: list[str]
    postgres_url: str | None
    redis_url: str | None
    extra: dict[str, Any] = field(default_factory=dict)


SCENARIOS = ("burst", "failover", "idle", "steady", "cost")


def _kinds(text: str, known: dict[str, str]) -> list[str]:
    names = [part for part in text.split(",") if part]
    unknown = set(names) - set(known)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {sorted(unknown)}; choose from {list(known)}")
    return [known[name] for name in names]


def parse_options(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--sizes", type=bd._sizes, default=[1000, 10000, 100000])
    parser.add_argument("--rt-sizes", type=bd._sizes, default=[1, 10, 100, 1000, 10000, 100000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--peer-repeats", type=int, default=1, help="runs of each peer above 1,000 entries"
    )
    parser.add_argument(
        "--big-repeats", type=int, default=1, help="runs of each kind at 100,000 entries or more"
    )
    parser.add_argument("--cap", type=float, default=240.0, help="longest burst run (s)")
    parser.add_argument("--stall", type=float, default=60.0)
    burst_default = ",".join(BURST_KINDS)
    parser.add_argument("--burst", default=burst_default, help=burst_default)
    kinds_default = ",".join(peers.KINDS)
    parser.add_argument("--steady", default=kinds_default, help=kinds_default)
    parser.add_argument("--idle", default=kinds_default, help=kinds_default)
    parser.add_argument("--steady-entries", type=int, default=1000)
    parser.add_argument("--steady-seconds", type=float, default=60.0)
    parser.add_argument("--steady-warmup", type=float, default=12.0)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--idle-warmup", type=float, default=20.0)
    parser.add_argument("--failover-repeats", type=int, default=3)
    parser.add_argument("--failover-cap", type=float, default=60.0)
    parser.add_argument("--failover-warmup", type=float, default=5.0)
    parser.add_argument("--json", type=Path, default=ROOT / ".bench" / "bench_peers.json")
    parser.add_argument("--plot", type=Path, default=ROOT / ".bench" / "bench_peers.png")
    parser.add_argument(
        "--profile",
        nargs="?",
        const="postgres",
        default="",
        help="also profile these kinds dispatching 10,000 entries with pyinstrument "
        "(default when given: postgres; e.g. --profile postgres,django)",
    )
    parser.add_argument("--postgres-url", help="admin URL (default: as the tests find it)")
    parser.add_argument("--redis-url", help="broker URL (default: as the tests find it)")
    parser.add_argument(
        "--render", type=Path, help="measure nothing: print the tables and plot of a saved JSON"
    )
    ns = parser.parse_args(argv)
    scenarios = [s for s in ns.scenarios.split(",") if s]
    if set(scenarios) - set(SCENARIOS):
        parser.error(f"--scenarios: choose from {','.join(SCENARIOS)}")
    try:
        burst_kinds = _kinds(ns.burst, BURST_KINDS)
        steady_kinds = _kinds(ns.steady, peers.KINDS)
        idle_kinds = _kinds(ns.idle, peers.KINDS)
        profile = _kinds(ns.profile, peers.KINDS)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    return Options(
        scenarios=scenarios,
        sizes=ns.sizes,
        rt_sizes=ns.rt_sizes,
        repeats=ns.repeats,
        peer_repeats=ns.peer_repeats,
        big_repeats=ns.big_repeats,
        cap=ns.cap,
        stall=ns.stall,
        burst_kinds=burst_kinds,
        idle_kinds=idle_kinds,
        steady_kinds=steady_kinds,
        steady_entries=ns.steady_entries,
        steady_seconds=ns.steady_seconds,
        steady_warmup=ns.steady_warmup,
        idle_seconds=ns.idle_seconds,
        idle_warmup=ns.idle_warmup,
        failover_repeats=ns.failover_repeats,
        failover_cap=ns.failover_cap,
        failover_warmup=ns.failover_warmup,
        json=ns.json,
        plot=ns.plot,
        log=ns.json.with_suffix(".log"),
        render=ns.render,
        profile=profile,
        postgres_url=ns.postgres_url,
        redis_url=ns.redis_url,
    )


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def memory_total() -> str:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return "?"


def versions(env: Env) -> dict[str, Any]:
    from importlib.metadata import version

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory": memory_total(),
        "celery": celery.__version__,
        "kombu": kombu.__version__,
        "redis_py": redis.__version__,
        "hiredis": version("hiredis"),
        "psycopg": version("psycopg"),
        "django": version("django"),
        "django_celery_beat": version("django-celery-beat"),
        "celery_redbeat": version("celery-redbeat"),
        "safebeat": safebeat.__version__,
        "postgresql": bd.postgres_version(env.pg_url),
        "redis_broker": env.queue.server_version(),
        "redis_store": env.store_server.version,
        "loadavg_at_start": loadavg(),
    }


def render(opts: Options) -> int:
    """Print the tables, the targets and the plot of a saved run again (`--render JSON`)."""
    report = json.loads(opts.render.read_text(encoding="utf-8"))
    saved = report["options"]
    shown = Options(**{**asdict(opts), **{k: saved[k] for k in RENDERED if k in saved}})
    texts = []
    if "burst" in report:
        texts += [burst_table(report["burst"], shown), rss_table(report["burst"], shown.sizes)]
    if "failover" in report:
        texts.append(failover_table(report["failover"], shown))
    if "idle" in report:
        texts.append(idle_table(report["idle"], shown))
    if "steady" in report:
        texts.append(steady_table(report["steady"], shown))
    if "cost" in report:
        texts.append(cost_tables(report["cost"]))
    texts.append(targets_table(targets(report)))
    print("\n\n".join(texts))
    plot(report, opts.plot)
    return 0


#: Options of a saved run that its tables' titles show.
RENDERED = (
    "sizes",
    "repeats",
    "peer_repeats",
    "big_repeats",
    "cap",
    "steady_entries",
    "steady_seconds",
    "idle_seconds",
    "failover_cap",
)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and len(sys.argv) == 3 and sys.argv[1] == "--child":
        print("RESULT " + json.dumps(child_burst(json.loads(sys.argv[2])), default=str))
        return 0
    opts = parse_options(argv)
    if opts.render:
        return render(opts)
    signal.signal(signal.SIGTERM, _interrupt)  # stop early: report what was measured, clean up
    opts.json.parent.mkdir(parents=True, exist_ok=True)
    opts.log.write_text("", encoding="utf-8")
    logging.basicConfig(filename=opts.log, level=logging.WARNING)
    env = open_env(opts)
    report: dict[str, Any] = {
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["tests/benchmarks/bench_peers.py", *(argv or sys.argv[1:])]),
        "environment": versions(env),
        "options": {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in asdict(opts).items()
            if k != "extra"
        },
    }
    e = report["environment"]
    print(
        f"safebeat {e['safebeat']}; Python {e['python']}; Celery {e['celery']}, kombu "
        f"{e['kombu']}, redis-py {e['redis_py']} (hiredis {e['hiredis']}), psycopg "
        f"{e['psycopg']}, Django {e['django']}, django-celery-beat {e['django_celery_beat']}, "
        f"celery-redbeat {e['celery_redbeat']}; PostgreSQL {e['postgresql']}, Redis "
        f"{e['redis_broker']}; {e['cpus']} CPUs, {e['memory']}; load {e['loadavg_at_start']}\n",
        flush=True,
    )
    texts: list[str] = []

    def show(text: str) -> None:
        """Print a table and write everything so far (a run cut short keeps its figures)."""
        texts.append(text)
        print(text + "\n", flush=True)
        opts.json.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
        opts.json.with_suffix(".txt").write_text("\n\n".join(texts) + "\n", encoding="utf-8")

    try:
        if "burst" in opts.scenarios:
            report["burst"] = burst(env, opts)
            report["loadavg_after_burst"] = loadavg()
            show(burst_table(report["burst"], opts))
            show(rss_table(report["burst"], opts.sizes))
        for kind in opts.profile:
            name = next(short for short, label in peers.KINDS.items() if label == kind)
            path = opts.json.with_name(f"profile-{name}-10000.txt")
            run_child(env, kind, 10_000, opts, profile=path)
            report.setdefault("profiles", {})[kind] = str(path)
            bd.progress(f"  profile: {path}")
        if "failover" in opts.scenarios:
            report["failover"] = failover(env, opts)
            show(failover_table(report["failover"], opts))
        if "idle" in opts.scenarios:
            report["idle"] = idle(env, opts)
            show(idle_table(report["idle"], opts))
        if "steady" in opts.scenarios:
            report["steady"] = [steady(env, kind, opts) for kind in opts.steady_kinds]
            report["loadavg_after_steady"] = loadavg()
            show(steady_table(report["steady"], opts))
        if "cost" in opts.scenarios:
            report["cost"] = cost(env, opts)
            show(cost_tables(report["cost"]))
    except KeyboardInterrupt:
        report["interrupted"] = True
        bd.progress("interrupted: reporting what was measured")
    finally:
        report["loadavg_at_end"] = loadavg()
        report["targets"] = targets(report)
        show(targets_table(report["targets"]))
        env.close()
    plot(report, opts.plot)
    print(
        f"load average at the end: {report['loadavg_at_end']}\nfigures: {opts.json}; "
        f"tables: {opts.json.with_suffix('.txt')}; plot: {opts.plot}; log: {opts.log}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
