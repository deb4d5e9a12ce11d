"""Registration benchmark: compiling a large schedule, then registering it on PostgreSQL.

What it measures: `compile_schedule` of `--entries` hourly entries (CPU seconds, the best
of `--repeats`), then `PostgresStore.register` of their definitions on a fresh namespace
(a first start) and once more (a restart with nothing changed): wall and CPU seconds of
this process, so the difference is the server's time.

What it needs: PostgreSQL, found the way the tests find it (tests/services.py). It creates
its own database and drops it.

How to run it (from the repository root):

    .venv/bin/python tests/benchmarks/bench_register.py --entries 300000
    .venv/bin/python tests/benchmarks/bench_register.py --entries 1000000 --repeats 1

Nothing here passes or fails on a number.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from datetime import timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere, not only via the editable install
    sys.path.insert(0, str(ROOT))

from safebeat.beat.housekeeping import Definitions  # noqa: E402
from safebeat.config import Config  # noqa: E402
from safebeat.entries import compile_schedule  # noqa: E402
from safebeat.identity import current_replica  # noqa: E402
from safebeat.stores.postgres import PostgresStore  # noqa: E402
from tests import services  # noqa: E402 - needs ROOT on sys.path


def timed(run: Callable[[], Any]) -> tuple[float, float]:
    """(wall, CPU) seconds of `run()`."""
    wall, cpu = time.monotonic(), time.process_time()
    run()
    return time.monotonic() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=3)
    opts = parser.parse_args(argv)
    namespace = f"bench-register-{uuid.uuid4().hex[:8]}"
    schedule = {
        f"bench-{i:07d}": {"task": "bench.task", "schedule": timedelta(hours=1), "args": (i,)}
        for i in range(opts.entries)
    }
    config = Config(namespace=namespace)
    compiles = []
    for _ in range(opts.repeats):
        started = time.process_time()
        entries, _ = compile_schedule(schedule, app_timezone=timezone.utc, config=config)
        compiles.append(time.process_time() - started)
    print(f"compile {opts.entries:,}: best {min(compiles):.2f} s CPU of {len(compiles)}")
    definitions = Definitions(list(entries.values()))
    admin, database = services.postgres_admin_url(), f"bench_register_{namespace[-8:]}"
    store = PostgresStore(services.create_database(admin, database))
    try:
        store.migrate()
        replica = current_replica()
        for label in ("first registration", "registering again"):
            wall, cpu = timed(lambda: store.register(namespace, definitions, replica))
            print(f"{label} of {opts.entries:,}: {wall:.2f} s, {cpu:.2f} s CPU")
    finally:
        store.close()
        services.drop_database(admin, database)
    return 0


if __name__ == "__main__":
    sys.exit(main())
