"""History benchmark: does a tick cost more in a namespace that has lived long?

What it measures, on PostgreSQL, in a database this script creates and drops:

1. Tick time: two namespaces of `--entries` entries (default 20) each, one with no history
   and one with `--rows` dispatch rows (default 10,000,000: a year of minutely windows for
   20 entries), half of them skips: half the entries were sent every window, the other
   half were sent once and skipped ever since (a paused entry's history, the worst case
   for finding the newest dispatched window). Every entry is due in every tick, whose plan
   writes nothing: the tick is the lock, the store's clock and the states, as on an idle
   minute. Median of `--ticks` ticks of each namespace, taken in turns, with the
   statements each tick sends (counted on the client: the statements of every message
   the store's cursor sends) and the shared buffers its `load_states` reads (EXPLAIN
   ANALYZE BUFFERS). Measured without the
   index of dispatched rows (schema 6: "before") and with it (schema 7: "after"), on the
   same rows; the time to build that index is reported too.

2. Prune throughput: `--prune-rows` rows (default 1,000,000) claimed before the retention
   are deleted by `PostgresStore.prune` in its batches: first one pass with beat's budget
   (`PRUNE_BUDGET`), whose rows over that pass and the wait beat leaves before the next
   (`BACKLOG_PRUNE_INTERVAL`) are the rate beat sustains on a backlog; then the rest
   without a budget, timed: rows per second, and the longest batch's transaction, beside
   the 1,000 windows a second a busy namespace writes.

The rows are written by `generate_series` with the secondary indexes dropped and built
again afterwards, which is much faster than ticks would write them; the tables are then
vacuumed and analyzed, as autovacuum would leave them.

What it needs: PostgreSQL, found the way the tests find them (tests/services.py), and
about 4 GB of disk for 10,000,000 rows.

How to run it (from the repository root):

    .venv/bin/python tests/benchmarks/bench_history.py
    .venv/bin/python tests/benchmarks/bench_history.py --rows 1000000 --ticks 50

`--json PATH` writes the figures too (tests/benchmarks/bench_targets.py reads them).
Nothing here passes or fails on a number.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere, not only via the editable install
    sys.path.insert(0, str(ROOT))

from safebeat.beat.housekeeping import BACKLOG_PRUNE_INTERVAL, PRUNE_BUDGET  # noqa: E402
from safebeat.identity import Replica  # noqa: E402
from safebeat.stores.postgres import MIGRATIONS, PostgresStore  # noqa: E402
from safebeat.stores.postgres.cursors import Q  # noqa: E402
from safebeat.stores.protocols import Definition, TickPlan  # noqa: E402
from safebeat.stores.sql_common import array_literal  # noqa: E402
from tests import services  # noqa: E402

REPLICA = Replica("bench-host", 1, "b00000")
#: The first window of the generated history.
T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
#: The index schema 7 adds, and the secondary indexes dropped while rows are loaded.
DISPATCHED_INDEX = "safebeat_dispatch_dispatched"
SECONDARY = (
    "safebeat_dispatch_unsent",
    "safebeat_dispatch_claimed_at",
    "safebeat_dispatch_running",
)

#: One entry's minutely windows from T0: sent, or (a skipping entry) sent once, then skipped.
HISTORY = """
INSERT INTO safebeat_dispatch
    (namespace, entry, window_at, status, task_id, task_name, reason, replica, host, pid,
     claimed_at, sent_at)
SELECT %(namespace)s, %(entry)s, w, s, CASE WHEN s = 'sent' THEN md5(%(entry)s || n) END,
       't.run', CASE WHEN s = 'skipped' THEN 'paused' END, 'r', 'h', 1, w,
       CASE WHEN s = 'sent' THEN w END
FROM generate_series(0, %(count)s - 1) AS n,
     LATERAL (SELECT %(t0)s::timestamptz + n * interval '1 minute' AS w,
                     CASE WHEN %(skipping)s AND n > 0 THEN 'skipped' ELSE 'sent' END AS s) AS r
"""


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class StatementCounter:
    """Counts the messages and statements psycopg's client-side cursors send."""

    def __init__(self) -> None:
        self.messages = 0
        self.statements = 0

    @contextmanager
    def counting(self) -> Iterator[None]:
        original = psycopg.ClientCursor.execute

        def execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            self.messages += 1
            self.statements += str(query).count(";\n") + 1  # a tick joins its statements so
            return original(cursor, query, *args, **kwargs)

        psycopg.ClientCursor.execute = execute  # type: ignore[method-assign]
        try:
            yield
        finally:
            psycopg.ClientCursor.execute = original  # type: ignore[method-assign]


def names_of(prefix: str, entries: int) -> list[str]:
    return [f"{prefix}-{n:02}" for n in range(entries)]


def load_history(
    conn: psycopg.Connection[Any], namespace: str, names: list[str], rows: int
) -> float:
    """Write `rows` rows over `names` (the second half of them skipping); return seconds."""
    started = time.monotonic()
    definitions = {
        row[0]: row[1]
        for row in conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE indexname = ANY(%s)",
            [list(SECONDARY)],
        )
    }
    for name in definitions:
        conn.execute(f"DROP INDEX {name}")
    per_entry = rows // len(names)
    for index, entry in enumerate(names):
        params = {
            "namespace": namespace,
            "entry": entry,
            "count": per_entry,
            "t0": T0,
            "skipping": index >= len(names) // 2,
        }
        conn.execute(HISTORY, params)
        progress(f"  {(index + 1) * per_entry:,} rows written")
    for definition in definitions.values():
        conn.execute(definition)
    conn.execute("VACUUM ANALYZE safebeat_dispatch")
    return time.monotonic() - started


def time_ticks(
    store: PostgresStore, namespaces: dict[str, list[str]], ticks: int
) -> dict[str, tuple[float, float]]:
    """{namespace: (median tick seconds, statements per tick)} of `ticks` ticks of each
    namespace that plan nothing, taken in turns so that the machine's load weighs on each
    alike."""
    counters = {namespace: StatementCounter() for namespace in namespaces}
    durations: dict[str, list[float]] = {namespace: [] for namespace in namespaces}

    def planner(now: datetime, states: Any) -> TickPlan:
        return TickPlan()

    for _ in range(ticks):
        for namespace, names in namespaces.items():
            with counters[namespace].counting():
                started = time.perf_counter()
                assert store.tick(namespace, names, planner, replica=REPLICA) is not None
                durations[namespace].append(time.perf_counter() - started)
    return {
        namespace: (statistics.median(durations[namespace]), counters[namespace].statements / ticks)
        for namespace in namespaces
    }


def load_states_buffers(conn: psycopg.Connection[Any], namespace: str, names: list[str]) -> int:
    """Shared buffers (hit and read) that load_states of `names` touches."""
    params = {"namespace": namespace, "names": array_literal(names)}
    cursor = psycopg.ClientCursor(conn)
    cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {Q['load_states']}", params)
    plan = cursor.fetchone()[0][0]["Plan"]
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


def measure(
    label: str,
    store: PostgresStore,
    conn: psycopg.Connection[Any],
    namespaces: dict[str, list[str]],
    ticks: int,
) -> list[dict[str, Any]]:
    rows = []
    for namespace, (tick, statements) in time_ticks(store, namespaces, ticks).items():
        buffers = load_states_buffers(conn, namespace, namespaces[namespace])
        rows.append(
            {
                "schema": label,
                "namespace": namespace,
                "tick_seconds": tick,
                "statements": statements,
                "buffers": buffers,
            }
        )
        progress(f"  {label} {namespace}: {tick * 1000:.2f} ms per tick")
    return rows


def measure_prune(store: PostgresStore, conn: psycopg.Connection[Any], rows: int) -> dict[str, Any]:
    """Pruning `rows` rows written before the retention: one pass with beat's budget, then
    the rest without one; rows, seconds and the longest batch transaction of each."""
    namespace = "prune"
    names = names_of("old", 20)
    store.register(namespace, [Definition(n, "every 1m", "d") for n in names], REPLICA)
    load_history(conn, namespace, names, rows)
    batches: list[float] = []
    original = store._cursors.transaction  # a benchmark times each batch

    @contextmanager
    def timed(action: str) -> Iterator[Any]:
        started = time.perf_counter()
        with original(action) as cursor:
            yield cursor
        batches.append(time.perf_counter() - started)

    store._cursors.transaction = timed  # type: ignore[method-assign]
    before = T0 + timedelta(days=3650)
    try:
        started = time.perf_counter()
        budgeted = store.prune(namespace, before, budget=PRUNE_BUDGET)
        pass_seconds = time.perf_counter() - started
        started = time.perf_counter()
        deleted = store.prune(namespace, before)
        elapsed = time.perf_counter() - started
    finally:
        store._cursors.transaction = original  # type: ignore[method-assign]
    return {
        "rows": rows,
        "deleted": deleted,
        "seconds": elapsed,
        "longest_batch_seconds": max(batches, default=0.0),
        "budget_pass_rows": budgeted,
        "budget_pass_seconds": pass_seconds,
        "backlog_interval": BACKLOG_PRUNE_INTERVAL,
        "sustained_rows_per_second": budgeted / (pass_seconds + BACKLOG_PRUNE_INTERVAL),
    }


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = [" | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("-|-".join("-" * w for w in widths))
    lines += [" | ".join(str(c).rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--entries", type=int, default=20)
    parser.add_argument("--ticks", type=int, default=30)
    parser.add_argument("--prune-rows", type=int, default=1_000_000)
    parser.add_argument("--json", type=Path, help="write the figures to this file too")
    args = parser.parse_args(argv)

    admin = services.postgres_admin_url()
    database = f"safebeat_bench_history_{uuid.uuid4().hex[:8]}"
    url = services.create_database(admin, database)
    progress(f"database {database}")
    store = PostgresStore(url)
    try:
        store.migrate()
        namespaces = {"empty": names_of("e", args.entries), "full": names_of("f", args.entries)}
        for namespace, names in namespaces.items():
            definitions = [Definition(n, "every 1m", "d") for n in names]
            store.register(namespace, definitions, REPLICA)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP INDEX {DISPATCHED_INDEX}")  # schema 6: "before"
            progress(f"writing {args.rows:,} rows")
            load_seconds = load_history(conn, "full", namespaces["full"], args.rows)
            size = conn.execute("SELECT pg_total_relation_size('safebeat_dispatch')").fetchone()
            results = measure("before (schema 6)", store, conn, namespaces, args.ticks)
            started = time.monotonic()
            conn.execute(next(m.sql for m in MIGRATIONS if m.version == 7))
            conn.execute("ANALYZE safebeat_dispatch")
            index_seconds = time.monotonic() - started
            results += measure("after (schema 7)", store, conn, namespaces, args.ticks)
            prune = measure_prune(store, conn, args.prune_rows) if args.prune_rows else None
    finally:
        store.close()
        services.drop_database(admin, database)

    print(f"\nHistory benchmark: {args.entries} entries per namespace, {args.ticks} ticks each")
    print(
        f"'full' holds {args.rows:,} dispatch rows, half skips (written in {load_seconds:.0f} s; "
        f"dispatch table and indexes {size[0] / 2**20:,.0f} MiB)"
    )
    print(
        f"building {DISPATCHED_INDEX} on them took {index_seconds:.1f} s "
        f"({index_seconds / (args.rows / 1e6):.2f} s per million rows)\n"
    )
    headers = ["schema", "namespace", "tick ms (median)", "statements/tick", "load_states buffers"]
    cells = [
        [
            r["schema"],
            r["namespace"],
            f"{r['tick_seconds'] * 1000:.2f}",
            f"{r['statements']:.0f}",
            f"{r['buffers']:,}",
        ]
        for r in results
    ]
    print(table(headers, cells))
    if prune is not None:
        rate = prune["deleted"] / prune["seconds"]
        print(
            f"\nprune: one pass with beat's budget deleted {prune['budget_pass_rows']:,} rows "
            f"in {prune['budget_pass_seconds']:.2f} s: {prune['sustained_rows_per_second']:,.0f} "
            f"rows/s with beat's {BACKLOG_PRUNE_INTERVAL:.0f} s between passes; the rest, "
            f"{prune['deleted']:,} rows, in {prune['seconds']:.1f} s = {rate:,.0f} rows/s; "
            f"longest batch transaction {prune['longest_batch_seconds'] * 1000:.0f} ms"
        )
    if args.json:
        report = {
            "rows": args.rows,
            "entries": args.entries,
            "ticks": args.ticks,
            "load_seconds": load_seconds,
            "index_seconds": index_seconds,
            "ticks_measured": results,
            "prune": prune,
        }
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
