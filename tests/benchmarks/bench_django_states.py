"""Django store benchmark: what one tick's state read costs through the ORM store.

What it measures: `--entries` entries (default 5,000) with `--rows` dispatch rows each
(default 20: sent windows, a claimed one whose run holds a live lease, then skipped
ones), in a database this script creates and drops, on each vendor the ORM store runs
on (`DjangoOrmStore`, also on PostgreSQL, where through psycopg 3 the `django://` store
otherwise runs the `postgresql://` store's statements). For the read of every entry's
state a tick makes (`_load` of all names), it prints the statements sent (Django's
`CaptureQueriesContext`, one round trip each), on PostgreSQL the shared buffers they read
(EXPLAIN (ANALYZE, BUFFERS) of each, summed), and the wall time: the median and the
range of `--reads` reads.

What it needs: PostgreSQL and, where reachable, MariaDB/MySQL, found the way the tests
find them (tests/services.py).

How to run it (from the repository root):

    .venv/bin/python tests/benchmarks/bench_django_states.py
    .venv/bin/python tests/benchmarks/bench_django_states.py --entries 1000 --reads 5

Nothing here passes or fails on a number.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere, not only via the editable install
    sys.path.insert(0, str(ROOT))

from tests import djangosite, services  # noqa: E402

NAMESPACE = "bench"
T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
BUFFERS = re.compile(r"Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fill(alias: str, entries: int, rows: int, namespace: str = NAMESPACE) -> list[str]:
    """Register `entries` entries of `namespace` and write `rows` dispatch rows each: sent
    windows, a claimed one whose run holds a live lease, then skipped ones. Return the
    names."""
    from safebeat.identity import Replica
    from safebeat.records import Definition
    from safebeat.stores.django.orm import DjangoOrmStore
    from safebeat.stores.django.setup import django_models

    names = [f"entry-{n:05}" for n in range(entries)]
    store = DjangoOrmStore(f"django://{alias}")
    replica = Replica("bench-host", 1, "b00000")
    store.register(namespace, [Definition(n, "every 1m", "d") for n in names], replica)
    m = django_models(alias)
    live = datetime.now(timezone.utc) + timedelta(days=1)
    batch: list[Any] = []
    for name in names:
        for n in range(rows):
            window = T0 + timedelta(minutes=n)
            status = "sent" if n < rows // 2 else "claimed" if n == rows // 2 else "skipped"
            running = status == "claimed"
            batch.append(
                m.Dispatch(
                    namespace=namespace,
                    entry=name,
                    window_at=window,
                    status=status,
                    task_id=f"{name}-{n}" if status != "skipped" else None,
                    task_name="t.run",
                    reason="paused" if status == "skipped" else None,
                    replica="r",
                    host="h",
                    pid=1,
                    claimed_at=window,
                    started_at=window if running else None,
                    lease_until=live if running else None,
                )
            )
        if len(batch) >= 10_000:
            m.Dispatch.objects.using(alias).bulk_create(batch, batch_size=1000)
            batch = []
    m.Dispatch.objects.using(alias).bulk_create(batch, batch_size=1000)
    return names


def buffers(alias: str, queries: list[dict[str, str]]) -> int:
    """The shared buffers the statements `queries` read, by EXPLAIN (ANALYZE, BUFFERS)."""
    from django.db import connections

    total = 0
    with connections[alias].cursor() as cursor:
        for query in queries:
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {query['sql']}")
            for (line,) in cursor.fetchall():
                found = BUFFERS.search(line)
                if found:  # the first is the top node's, which includes its children's
                    total += sum(int(n or 0) for n in found.groups())
                    break
    return total


def measure(alias: str, vendor: str, entries: int, rows: int, reads: int) -> dict[str, Any]:
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    from safebeat.stores.django.orm import DjangoOrmStore

    progress(f"{vendor}: writing {entries:,} entries x {rows} rows")
    names = fill(alias, entries, rows)
    if vendor == "postgres":
        with connections[alias].cursor() as cursor:
            cursor.execute("VACUUM ANALYZE safebeat_dispatch")
            cursor.execute("VACUUM ANALYZE safebeat_entry")
    elif vendor == "mariadb":
        with connections[alias].cursor() as cursor:
            cursor.execute("ANALYZE TABLE safebeat_dispatch, safebeat_entry")
            cursor.fetchall()
    else:
        with connections[alias].cursor() as cursor:
            cursor.execute("ANALYZE")
    store = DjangoOrmStore(f"django://{alias}")
    states = store._load(NAMESPACE, names)  # warm
    assert len(states) == entries
    assert all(s.unreadable is None for s in states.values())
    times = []
    for _ in range(reads):
        with CaptureQueriesContext(connections[alias]) as captured:
            started = time.perf_counter()
            store._load(NAMESPACE, names)
            times.append(time.perf_counter() - started)
    queries = list(captured.captured_queries)
    return {
        "vendor": vendor,
        "statements": len(queries),
        "buffers": buffers(alias, queries) if vendor == "postgres" else None,
        "median_ms": statistics.median(times) * 1000,
        "min_ms": min(times) * 1000,
        "max_ms": max(times) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=5000)
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--reads", type=int, default=9)
    parser.add_argument("--vendors", default="sqlite,postgres,mariadb")
    args = parser.parse_args()
    name = f"safebeat_bench_{uuid.uuid4().hex[:8]}"
    admin = services.postgres_admin_url()
    folder = tempfile.mkdtemp()
    databases: dict[str, dict[str, object]] = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": f"{folder}/default.db"},
        "sqlite": {"ENGINE": "django.db.backends.sqlite3", "NAME": f"{folder}/bench.db"},
        "postgres": djangosite.postgres_database(services.create_database(admin, name)),
    }
    mysql = djangosite.mysql_url()
    if mysql is not None:
        djangosite.create_mysql_database(mysql, name)
        databases["mariadb"] = djangosite.mysql_database(mysql, name)
    djangosite.configure(databases)
    results = []
    try:
        for vendor in args.vendors.split(","):
            if vendor not in databases:
                progress(f"{vendor}: no server, skipped")
                continue
            djangosite.migrate(vendor, "safebeat")
            results.append(measure(vendor, vendor, args.entries, args.rows, args.reads))
    finally:
        from django.db import connections

        connections.close_all()
        services.drop_database(admin, name)
        if mysql is not None:
            djangosite.drop_mysql_database(mysql, name)
    print(f"state read of {args.entries:,} entries x {args.rows} rows, {args.reads} reads")
    print(f"{'vendor':<10}{'statements':>12}{'buffers':>10}{'median ms':>12}{'range ms':>18}")
    for r in results:
        shown = "-" if r["buffers"] is None else f"{r['buffers']:,}"
        spread = f"{r['min_ms']:.0f}-{r['max_ms']:.0f}"
        print(
            f"{r['vendor']:<10}{r['statements']:>12}{shown:>10}{r['median_ms']:>12.0f}{spread:>18}"
        )


if __name__ == "__main__":
    main()
