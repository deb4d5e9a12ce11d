"""Scale benchmark: replicas 1/2/3 on one burst, a large schedule on one replica, idle cost,
and django-celery-beat's rows. Prints figures; nothing passes or fails on a number.

Every replica is a process of its own (tests/benchmarks/scale_child.py) driving tick()
like beat's loop, on PostgreSQL (a database of this run's own) and Redis (a redis-server
of this run's own); the broker is the Redis the tests use, a queue of this run's own.

1. replicas: `--burst` entries (default 100,000) due at one instant, with 1, 2 and 3
   replicas: seconds from that instant until LLEN shows every message on the broker,
   messages per replica, speed-up against one replica.
2. big: one replica with `--big-sizes` entries (default 100,000 and 300,000; 1,000,000 with
   `--big-sizes 1000000`, which takes long: start it early): compile,
   register on first start and on restart, the first pass (every entry planned once), an
   idle tick, min(N, 100,000) entries due at one instant, peak RSS (VmHWM); restart to
   first dispatch (a restart with one entry every second added: process start to its
   first message).
3. idle: one replica with `--idle-sizes` entries, none due, for `--idle-seconds`: CPU and
   store round trips per second (PostgreSQL: a counting proxy; Redis: the commands its
   server received from the replica).
4. dcb: safebeat's and django-celery-beat's own DatabaseScheduler over `--dcb-sizes`
   PeriodicTask rows (PostgreSQL through Django): start-up, seconds until an edit of a
   row's interval through the ORM (as the admin does) is picked up, peak RSS.
5. memory (not in the default run): peak RSS of one replica after registering
   `--memory-sizes` entries; with `--trace`, tracemalloc's largest allocation sites.

    make bench-scale
    .venv/bin/python tests/benchmarks/bench_scale.py --scenarios replicas --burst 10000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from tests import services  # noqa: E402
from tests.benchmarks import bench_dispatch as bd  # noqa: E402
from tests.benchmarks import peers  # noqa: E402
from tests.benchmarks.bench_peers import cpu_seconds, loadavg, pg_parts  # noqa: E402

CHILD = str(Path(__file__).with_name("scale_child.py"))
MIB = 1024 * 1024
STORES = {"postgres": "PostgreSQL", "redis": "Redis"}


@dataclass
class Env:
    """The servers and queues of this run."""

    queue: bd.BrokerQueue
    warm: bd.BrokerQueue
    admin_url: str
    database: str
    pg_url: str
    redis_server: bd.RedisStoreServer
    log: Path
    urls: dict[str, str] = field(default_factory=dict)

    def close(self) -> None:
        self.queue.delete()
        self.warm.delete()
        from django.db import connections

        connections.close_all()
        services.drop_database(self.admin_url, self.database)
        self.redis_server.stop()


def open_env(log: Path) -> Env:
    broker = services.redis_url()
    admin_url = services.postgres_admin_url()
    database = f"safebeat_scale_{uuid.uuid4().hex[:8]}"
    pg_url = services.create_database(admin_url, database)
    server = bd.RedisStoreServer()
    peers.configure_django({"default": pg_url})
    from tests import djangosite

    djangosite.migrate("default")
    env = Env(
        bd.BrokerQueue(broker), bd.BrokerQueue(broker), admin_url, database, pg_url, server, log
    )
    env.urls = {"postgres": pg_url, "redis": server.url}
    return env


class Child:
    """One scale_child.py process; its READY and RESULT lines."""

    def __init__(self, env: Env, config: dict[str, Any]) -> None:
        config = {
            "broker": env.queue.url,
            "queue": env.queue.name,
            "warm_queue": env.warm.name,
            **config,
        }
        self.started = time.time()
        with env.log.open("a") as log:
            self.process = subprocess.Popen(
                [sys.executable, CHILD, json.dumps(config)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )

    def line(self, tag: str, timeout: float) -> dict[str, Any]:
        """The next line tagged `tag` ({} if the process ended or the time ran out first)."""
        assert self.process.stdout is not None
        deadline = time.time() + timeout
        while time.time() < deadline:
            text = self.process.stdout.readline()
            if not text:
                return {}
            if text.startswith(tag + " "):
                return dict(json.loads(text.removeprefix(tag + " ")))
        return {}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def namespace() -> str:
    return f"scale-{uuid.uuid4().hex[:8]}"


def burst_config(
    env: Env, mode: str, store: str, size: int, *, lead: float, opts: argparse.Namespace
) -> dict[str, Any]:
    """A child's description: `size` entries in a namespace of their own, due `lead` s on."""
    return {
        "mode": mode,
        "store": env.urls[store],
        "namespace": namespace(),
        "count": size,
        "due_at": float(int(time.time() + lead)),
        "cap": opts.cap,
    }


def wait_for_messages(env: Env, count: int, until: float) -> float | None:
    """The instant LLEN first showed `count` messages (polled every 10 ms), None at `until`."""
    while time.time() < until:
        if env.queue.count() >= count:
            return time.time()
        time.sleep(0.01)
    return None


# --- 1. replicas -----------------------------------------------------------------------------


def replicas(env: Env, store: str, size: int, replicas: int, opts: argparse.Namespace) -> dict:
    """`size` entries due at one instant, `replicas` processes; figures of the burst."""
    lead = opts.lead or 15 + replicas * size / 4000
    config = burst_config(env, "replica", store, size, lead=lead, opts=opts)
    due_at = config["due_at"]
    children = [Child(env, config) for _ in range(replicas)]
    try:
        ready = [child.line("READY", lead + 60).get("at") for child in children]
        done = wait_for_messages(env, size, due_at + opts.cap)
        results = [child.line("RESULT", opts.cap + 60) for child in children]
    finally:
        for child in children:
            child.stop()
        env.queue.purge()
    sent = [r.get("sent", 0) for r in results]
    return {
        "store": STORES[store],
        "size": size,
        "replicas": replicas,
        "seconds": None if done is None else done - due_at,
        "sent": sent,
        "ready_before_due": all(at is not None and at < due_at for at in ready),
        "rss_mib": [round(r.get("rss", 0) / MIB) for r in results],
        "cpu_seconds": [r.get("cpu_seconds") for r in results],
        **{key: [r.get(key, 0) for r in results] for key in CLAIM_COUNTS},
    }


#: Per replica, its CPU from the burst's instant until it had nothing due (the windows others
#: claimed looked at too), and what its claim rounds did meanwhile (scale_child.ClaimCounts):
#: windows asked to claim, windows claimed, rounds, rounds that claimed nothing, busy locks.
CLAIM_COUNTS = ("cpu_until_idle", "asked", "claimed", "rounds", "empty_rounds", "busy_rounds")


def replicas_table(rows: list[dict[str, Any]]) -> str:
    base = {r["store"]: r["seconds"] for r in rows if r["replicas"] == 1}
    table = []
    for r in rows:
        one = base.get(r["store"])
        speedup = f"{one / r['seconds']:.2f}x" if one and r["seconds"] else "—"
        table.append(
            [
                r["store"],
                str(r["replicas"]),
                "stalled" if r["seconds"] is None else f"{r['seconds']:.1f}",
                speedup,
                " / ".join(f"{s:,}" for s in r["sent"]),
                " / ".join(str(m) for m in r["rss_mib"]),
                f"{sum(c or 0 for c in r['cpu_seconds']):.1f}"
                f" / {sum(c or 0 for c in r.get('cpu_until_idle', [])):.1f}",
                " / ".join(f"{a:,}" for a in r.get("asked", [])),
                " / ".join(str(e) for e in r.get("empty_rounds", [])),
                " / ".join(str(b) for b in r.get("busy_rounds", [])),
                "" if r["ready_before_due"] else "not ready at the due instant",
            ]
        )
    headers = [
        "store",
        "replicas",
        "seconds",
        "speed-up",
        "messages per replica",
        "peak RSS MiB",
        "CPU s, all replicas: burst / until idle",
        "windows asked to claim",
        "rounds claiming none",
        "busy locks",
        "",
    ]
    size = rows[0]["size"] if rows else 0
    return f"Replicas: {size:,} windows due at one instant\n{bd.table(headers, table)}"


# --- 2. big --------------------------------------------------------------------------------


def big(env: Env, store: str, size: int, opts: argparse.Namespace) -> dict[str, Any]:
    """One replica with `size` entries: first start (with a burst), then a restart."""
    due_count = min(size, 100_000)
    lead = opts.lead or 20 + size / 2500
    config = burst_config(env, "big", store, size, lead=lead, opts=opts)
    config.update(due_count=due_count, pulse=False)
    due_at = config["due_at"]
    child = Child(env, config)
    try:
        ready = child.line("READY", lead + 120).get("at")
        done = wait_for_messages(env, due_count, due_at + opts.cap)
        first = child.line("RESULT", opts.cap + 120)
    finally:
        child.stop()
        env.queue.purge()
    restart = Child(env, {**config, "pulse": True})
    try:
        again = restart.line("RESULT", 600)
    finally:
        restart.stop()
        env.queue.purge()
    first_sent = again.get("first_sent")
    return {
        "store": STORES[store],
        "size": size,
        "due": due_count,
        "first": first,
        "restart": again,
        "burst_seconds": None if done is None else done - due_at,
        "ready_before_due": ready is not None and ready < due_at,
        "restart_to_dispatch": None if first_sent is None else first_sent - restart.started,
    }


def big_table(rows: list[dict[str, Any]]) -> str:
    def secs(value: float | None) -> str:
        return "—" if value is None else f"{value:.1f}"

    table = []
    for r in rows:
        first, again = r["first"], r["restart"]
        table.append(
            [
                r["store"],
                f"{r['size']:,}",
                secs(first.get("compile")),
                secs(first.get("register")),
                secs(again.get("register")),
                secs(first.get("first_pass")),
                "—" if first.get("idle_tick") is None else f"{first['idle_tick'] * 1000:.0f} ms",
                f"{secs(r['burst_seconds'])} ({r['due']:,})"
                + ("" if r["ready_before_due"] else " not ready"),
                secs(r["restart_to_dispatch"]),
                str(round(first.get("rss", 0) / MIB)),
                str(round(again.get("rss", 0) / MIB)),
            ]
        )
    headers = [
        "store",
        "entries",
        "compile s",
        "register s",
        "register again s",
        "first pass s",
        "idle tick",
        "burst s (due)",
        "restart to dispatch s",
        "peak RSS MiB",
        "restart peak MiB",
    ]
    return f"One replica, many entries\n{bd.table(headers, table)}"


# --- 3. idle -------------------------------------------------------------------------------


def idle(env: Env, store: str, size: int, opts: argparse.Namespace) -> dict[str, Any]:
    """CPU and store round trips per second of one replica with `size` entries, none due."""
    proxy = bd.RoundTripProxy(*pg_parts(env.pg_url)) if store == "postgres" else None
    url = bd.via_proxy(env.pg_url, proxy.port) if proxy else env.urls[store]
    child = Child(env, {"mode": "idle", "store": url, "namespace": namespace(), "count": size})
    meter = None
    try:
        ready = child.line("READY", 600)
        time.sleep(opts.idle_warmup)
        pid = child.process.pid
        if proxy is None:
            meter = bd.RedisCommandMeter(env.urls[store])
            meter.start()
        before_cpu, before = cpu_seconds(pid), proxy.traffic() if proxy else None
        started = time.monotonic()
        time.sleep(opts.idle_seconds)
        elapsed = time.monotonic() - started
        cpu = cpu_seconds(pid) - before_cpu
        if proxy is not None and before is not None:
            trips = (proxy.traffic() - before).round_trips
        else:
            assert meter is not None
            trips = meter.stop().traffic.round_trips
    finally:
        child.stop()
        if meter is not None:
            meter.close()
        if proxy is not None:
            proxy.close()
    return {
        "store": STORES[store],
        "size": size,
        "cpu_percent": 100 * cpu / elapsed,
        "round_trips_per_second": trips / elapsed,
        "rss_mib": round(ready.get("rss", 0) / MIB),
    }


def idle_table(rows: list[dict[str, Any]], seconds: float) -> str:
    table = [
        [
            r["store"],
            f"{r['size']:,}",
            f"{r['cpu_percent']:.2f}",
            f"{r['round_trips_per_second']:.2f}",
            str(r["rss_mib"]),
        ]
        for r in rows
    ]
    headers = ["store", "entries", "CPU %", "store round trips/s", "RSS MiB"]
    return f"An idle replica ({seconds:.0f} s, none due)\n{bd.table(headers, table)}"


# --- 4. django-celery-beat rows --------------------------------------------------------------


def edit_row(name: str, every: int) -> None:
    """Change a row's interval the way the admin's change form does: a model save()."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    task = PeriodicTask.objects.get(name=name)
    task.interval, _ = IntervalSchedule.objects.get_or_create(
        every=every, period=IntervalSchedule.SECONDS
    )
    task.save()


def dcb(env: Env, kind: str, size: int, opts: argparse.Namespace) -> dict[str, Any]:
    peers.create_dcb_rows(size, [3600.0], datetime.now(timezone.utc))
    watch = f"bench-{size // 2:06d}"
    deadline = time.time() + 600
    config = {
        "mode": "dcb",
        "kind": kind,
        "django": env.pg_url,
        "store": "django://",
        "namespace": namespace(),
        "watch": watch,
        "deadline": deadline,
    }
    child = Child(env, config)
    try:
        child.line("READY", 600)
        time.sleep(1.0)
        edited = time.time()
        edit_row(watch, 1800)
        result = child.line("RESULT", 120)
    finally:
        child.stop()
        env.queue.purge()
    seen = result.get("seen")
    return {
        "scheduler": kind,
        "size": size,
        "startup": result.get("startup"),
        "startup_cpu": result.get("startup_cpu"),
        "pickup": None if seen is None else seen - edited,
        "rss_mib": round(result.get("rss", 0) / MIB),
    }


def dcb_table(rows: list[dict[str, Any]]) -> str:
    def secs(value: float | None) -> str:
        return "—" if value is None else f"{value:.1f}"

    table = [
        [
            r["scheduler"],
            f"{r['size']:,}",
            secs(r["startup"]),
            secs(r.get("startup_cpu")),
            secs(r["pickup"]),
            str(r["rss_mib"]),
        ]
        for r in rows
    ]
    headers = [
        "scheduler",
        "PeriodicTask rows",
        "start-up s",
        "its CPU s",
        "edit picked up s",
        "peak RSS MiB",
    ]
    return f"django-celery-beat's rows\n{bd.table(headers, table)}"


# --- 5. memory --------------------------------------------------------------------------------


def memory_child(env: Env, store: str, size: int, *, trace: bool) -> dict[str, Any]:
    config = {"mode": "memory", "store": env.urls[store], "namespace": namespace()}
    child = Child(env, {**config, "count": size, "trace": trace})
    try:
        return child.line("RESULT", 900)
    finally:
        child.stop()


def memory(env: Env, store: str, size: int, *, trace: bool) -> dict[str, Any]:
    """Peak RSS of one replica after registering `size` entries; with `trace`, tracemalloc's
    top sites from a second run (tracing costs memory of its own: not in the RSS figure)."""
    result = memory_child(env, store, size, trace=False)
    if trace:
        result["top"] = memory_child(env, store, size, trace=True).get("top")
    return {
        "store": STORES[store],
        "size": size,
        "rss_mib": round(result.get("rss", 0) / MIB),
        "base_mib": round(result.get("base_rss", 0) / MIB),
        **result,
    }


def memory_table(rows: list[dict[str, Any]]) -> str:
    table = [[r["store"], f"{r['size']:,}", str(r["base_mib"]), str(r["rss_mib"])] for r in rows]
    headers = ["store", "entries", "before the scheduler MiB", "peak RSS MiB"]
    text = f"Peak RSS after registration\n{bd.table(headers, table)}"
    for r in rows:
        if r.get("top"):
            text += f"\n\ntracemalloc, {r['store']}, {r['size']:,} entries:\n" + "\n".join(r["top"])
    return text


# --- the command -----------------------------------------------------------------------------


def sizes(text: str) -> list[int]:
    return [int(part.replace("_", "")) for part in text.split(",") if part]


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="replicas,big,idle,dcb")
    parser.add_argument("--stores", default="postgres,redis")
    parser.add_argument("--burst", type=int, default=100_000)
    parser.add_argument("--replicas", type=sizes, default=[1, 2, 3])
    parser.add_argument("--big-sizes", type=sizes, default=[100_000, 300_000])
    parser.add_argument("--idle-sizes", type=sizes, default=[1_000, 100_000])
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--idle-warmup", type=float, default=3.0)
    parser.add_argument("--dcb-sizes", type=sizes, default=[10_000, 100_000])
    parser.add_argument("--memory-sizes", type=sizes, default=[100_000])
    parser.add_argument("--trace", action="store_true", help="tracemalloc's top sites too")
    parser.add_argument("--cap", type=float, default=180.0, help="seconds a burst may take")
    parser.add_argument("--lead", type=float, default=0.0, help="seconds from start to due")
    parser.add_argument("--json", type=Path, default=ROOT / ".bench" / "bench_scale.json")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_options(argv)
    scenarios, stores = opts.scenarios.split(","), opts.stores.split(",")
    opts.json.parent.mkdir(parents=True, exist_ok=True)
    log = opts.json.with_suffix(".log")
    env = open_env(log)
    report: dict[str, Any] = {"load_before": loadavg(), "cpus": os.cpu_count()}
    tables = []
    try:
        if "replicas" in scenarios:
            found = []
            for store in stores:
                for count in opts.replicas:
                    found.append(replicas(env, store, opts.burst, count, opts))
                    bd.progress(f"  replicas {store} x{count}: {found[-1]}")
            report["replicas"] = found
            tables.append(replicas_table(found))
        if "big" in scenarios:
            report["big"] = [big(env, s, n, opts) for s in stores for n in opts.big_sizes]
            tables.append(big_table(report["big"]))
        if "idle" in scenarios:
            report["idle"] = [idle(env, s, n, opts) for s in stores for n in opts.idle_sizes]
            tables.append(idle_table(report["idle"], opts.idle_seconds))
        if "dcb" in scenarios:
            kinds = (peers.DJANGO, peers.DCB)
            report["dcb"] = [dcb(env, k, n, opts) for n in opts.dcb_sizes for k in kinds]
            tables.append(dcb_table(report["dcb"]))
        if "memory" in scenarios:
            report["memory"] = [
                memory(env, s, n, trace=opts.trace) for s in stores for n in opts.memory_sizes
            ]
            tables.append(memory_table(report["memory"]))
    finally:
        env.close()
    report["load_after"] = loadavg()
    opts.json.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    print(f"Load average before / after: {report['load_before']} / {report['load_after']}")
    print("\n\n".join(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
