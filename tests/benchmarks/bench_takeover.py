"""Take-over benchmark: what one take-over tick costs with many stale claims nobody takes.

What it measures: for each store (`--stores`, default sqlite, postgres and redis), a
namespace gets `--claims` stale claims (default 100,000) of an entry no replica defines,
claimed 5,000 per tick and handed back (`release_claims`), as a long outage leaves them.
Then a replica that defines another entry runs take-over ticks (`Reclaim`), timed from
the call to its return: with the default page of 4,000, and with a page larger than the
backlog, which reads every stale claim as each pass did before pages. Median and best of
`--repeats` ticks each. Each tick reads from the oldest (no `Reclaim.after`), the place
a pass reads most from on PostgreSQL and Redis (the rows of the page's last instant).

What it needs: PostgreSQL and Redis, found the way the tests find them
(tests/services.py); SQLite in a temporary folder. It creates its own database and
namespace, and drops them.

How to run it (from the repository root):

    .venv/bin/python tests/benchmarks/bench_takeover.py
    .venv/bin/python tests/benchmarks/bench_takeover.py --stores postgres --claims 400000

Nothing here passes or fails on a number.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere, not only via the editable install
    sys.path.insert(0, str(ROOT))

from safebeat.identity import Replica, task_id_for  # noqa: E402
from safebeat.records import Definition, NewClaim, Reclaim, TickPlan  # noqa: E402
from safebeat.stores.postgres import PostgresStore  # noqa: E402
from safebeat.stores.protocols import Store  # noqa: E402
from safebeat.stores.redis import RedisStore  # noqa: E402
from safebeat.stores.sqlite import SqliteStore  # noqa: E402
from tests import services  # noqa: E402 - needs ROOT on sys.path

HOUR = timedelta(hours=1)
REPLICA = Replica("bench-takeover", 1, "b00000")
CLAIMS_PER_TICK = 5000


@contextlib.contextmanager
def opened(kind: str, namespace: str) -> Iterator[Store]:
    """A migrated store of `kind` of this run's own, removed afterwards."""
    lock_timeout = timedelta(seconds=30)
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            store: Store = SqliteStore(f"sqlite:///{folder}/takeover.sqlite3")
            store.migrate()
            yield store
            store.close()
    elif kind == "postgres":
        admin, database = services.postgres_admin_url(), f"bench_takeover_{namespace[-8:]}"
        store = PostgresStore(services.create_database(admin, database), lock_timeout=lock_timeout)
        try:
            store.migrate()
            yield store
        finally:
            store.close()
            services.drop_database(admin, database)
    else:
        url = services.redis_url()
        store = RedisStore(url, lock_timeout=lock_timeout)
        try:
            store.migrate()
            yield store
        finally:
            store.close()
            client = redis.Redis.from_url(url)
            keys = list(client.scan_iter(match=f"safebeat:{{{namespace}}}*", count=10000))
            for start in range(0, len(keys), 1000):
                client.delete(*keys[start : start + 1000])


def leave_stale_claims(store: Store, namespace: str, claims: int) -> None:
    """`claims` stale claims of entry "gone", claimed a tick's worth at a time."""
    store.register(namespace, [Definition("gone", "every 1s", "d")], REPLICA)
    anchor = store.states(namespace)["gone"].anchor
    for start in range(0, claims, CLAIMS_PER_TICK):
        numbers = range(start, min(claims, start + CLAIMS_PER_TICK))
        windows = [anchor + timedelta(seconds=n + 1) for n in numbers]
        plan = TickPlan(
            claims=[NewClaim("gone", w, task_id_for(namespace, "gone", w), "t") for w in windows]
        )
        result = store.tick(namespace, [], lambda now, s, p=plan: p, replica=REPLICA)
        assert result is not None  # nobody else holds this namespace's lock
        store.release_claims(namespace, result.claimed, replica=REPLICA, timeout=HOUR)


def take_over_ticks(store: Store, namespace: str, page: int, repeats: int) -> list[float]:
    """Seconds of each of `repeats` take-over ticks reading pages of `page` claims."""
    took = []
    for _ in range(repeats):
        started = time.perf_counter()
        store.tick(
            namespace,
            [],
            lambda now, s: TickPlan(),
            replica=REPLICA,
            reclaim=Reclaim({"mine"}, HOUR, page=page),
        )
        took.append(time.perf_counter() - started)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres,redis")
    parser.add_argument("--claims", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{args.claims:,} stale claims nobody takes; one take-over tick, ms")
    for kind in args.stores.split(","):
        namespace = f"bench-takeover-{uuid.uuid4().hex[:8]}"
        with opened(kind, namespace) as store:
            leave_stale_claims(store, namespace, args.claims)
            for label, page in (("page of 4,000", 4000), ("every claim", args.claims + 1)):
                took = take_over_ticks(store, namespace, page, args.repeats)
                print(
                    f"{kind:9} {label:14} median {statistics.median(took) * 1000:7.1f}"
                    f"  best {min(took) * 1000:7.1f}"
                )


if __name__ == "__main__":
    main()
