"""What a scrape costs at scale: the series one beat replica serves for N entries (default
100,000) and the time to render them, and the same for `safebeat exporter`. Prints
figures; nothing passes or fails on a number.

Beat: a `BeatMetrics` registry filled as beat fills it while it serves metrics: the
entries' count reported (with the per-entry series that release exports at startup), and
one window of every entry dispatched (`_created` series on or off as that release serves
them). Then `generate_latest` (what a scrape runs) is
timed, best of `--repeats`, and its samples and bytes counted. Run it on another checkout
(`PYTHONPATH=/path/to/checkout`) to compare releases: it uses only what 0.1.0 has too.

Exporter (where the checkout has it): N entries registered in a memory store, one due
window each decided; one reading of the store (`namespace_health`) and one render, with
the default `--max-entries` (1,000) and with 0 (totals only).

    .venv/bin/python tests/benchmarks/bench_metrics.py
    .venv/bin/python tests/benchmarks/bench_metrics.py --entries 10000 --repeats 1
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from safebeat import prometheus_table
from safebeat.beat.metrics import BeatMetrics
from safebeat.beat.reporting import report_entries
from safebeat.config import Config
from safebeat.entries import Entry, compile_entry

NAMESPACE = "bench"
WINDOW = datetime(2030, 1, 7, 9, tzinfo=timezone.utc)


def entries(count: int) -> dict[str, Entry]:
    """`count` entries: every fourth a crontab, the others intervals of 1 to 60 minutes."""
    from celery.schedules import crontab

    config = Config(namespace=NAMESPACE)
    compiled = {}
    for index in range(count):
        name = f"entry-{index:06d}"
        schedule: Any = (
            crontab(minute=str(index % 60)) if index % 4 == 0 else 60.0 * (1 + index % 60)
        )
        compiled[name] = compile_entry(
            name, {"task": "t.run", "schedule": schedule}, app_timezone=timezone.utc, config=config
        )
    return compiled


def render(registry: CollectorRegistry, repeats: int) -> dict[str, float]:
    """Best time of `repeats` renders, and the samples and bytes of the body."""
    best = float("inf")
    body = b""
    for _ in range(repeats):
        started = time.perf_counter()
        body = generate_latest(registry)
        best = min(best, time.perf_counter() - started)
    samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return {"render_seconds": round(best, 3), "samples": samples, "bytes": len(body)}


def beat(compiled: dict[str, Entry], repeats: int) -> dict[str, float]:
    metrics = BeatMetrics(NAMESPACE, "host:1:aaaaaa", "postgresql://db/safebeat")
    # As once `serve` ran, without opening a port: recording, and `_created` off where this
    # release turns it off when it serves.
    metrics.recording = True
    without_created = getattr(prometheus_table, "without_created_series", None)
    if without_created is not None:
        without_created()
    report_entries(compiled, {}, {}, metrics)
    for name in compiled:
        metrics.dispatched(name, WINDOW, WINDOW + timedelta(seconds=1))
    return render(metrics.registry, repeats)


def exporter(compiled: dict[str, Entry], repeats: int) -> dict[str, Any]:
    from safebeat.identity import Replica, task_id_for
    from safebeat.ops.exporter import ScheduleHealthCollector
    from safebeat.ops.schedule_health import DueWindows, namespace_health
    from safebeat.records import NewClaim, TickPlan
    from safebeat.stores.memory import MemoryStore

    now = [WINDOW - timedelta(hours=1)]
    store = MemoryStore(clock=lambda: now[0])
    replica = Replica("host", 1, "aaaaaa")
    store.register(NAMESPACE, [e.definition for e in compiled.values()], replica)
    now[0] = WINDOW
    plan = TickPlan(
        claims=[NewClaim(n, WINDOW, task_id_for(NAMESPACE, n, WINDOW), "t.run") for n in compiled],
        advances=dict.fromkeys(compiled, WINDOW),
    )
    store.tick(NAMESPACE, list(compiled), lambda at, states: plan, replica=replica)
    now[0] = WINDOW + timedelta(minutes=90)
    figures: dict[str, Any] = {}
    for cap in (1000, 0):
        remembered = DueWindows()

        def read(cap: int = cap, remembered: DueWindows = remembered) -> Any:
            return namespace_health(
                store,
                NAMESPACE,
                compiled,
                grace=timedelta(seconds=60),
                claim_timeout=timedelta(seconds=30),
                max_entries=cap,
                recent_rows=10_000,
                remembered=remembered,
            )

        collector = ScheduleHealthCollector(NAMESPACE, read, time.perf_counter)
        collector.refresh()
        assert collector.reading is not None
        first = collector.reading.seconds
        collector.refresh()  # the steady state: due windows remembered
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        figures[f"max_entries={cap}"] = {
            "first_read_seconds": round(first, 3),
            "later_read_seconds": round(collector.reading.seconds, 3),
            "overdue": collector.reading.health.overdue,
            **render(registry, repeats),
        }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    started = time.perf_counter()
    compiled = entries(options.entries)
    results: dict[str, Any] = {
        "entries": options.entries,
        "compile_seconds": round(time.perf_counter() - started, 1),
        "beat": beat(compiled, options.repeats),
    }
    if importlib.util.find_spec("safebeat.ops.exporter") is not None:
        results["exporter"] = exporter(compiled, options.repeats)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
