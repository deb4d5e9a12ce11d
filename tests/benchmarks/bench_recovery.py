"""Recovery benchmark: how long after a worker is SIGKILLed its window runs again, and what
the leases cost the store.

What it measures, from outside, with real processes: a real `celery beat -S
safebeat.Scheduler` on PostgreSQL and a real worker (`tests.acceptance.workerapp`, the
worker hook installed) consuming a RabbitMQ (or Redis) queue. One window of an entry is
published as beat publishes it; its task sleeps `--sleep` seconds. Once the run has started
and gone on for a random 2 to 8 s (so the kill falls anywhere in the renewal period),
the worker's whole process tree is SIGKILLed and a fresh worker is started at once. Each
repeat prints the seconds from the kill to the fresh worker being ready, to the window's
second run starting (`restart`: the recovery) and to it completing (`done`, which adds the
task's own `--sleep`), and whether the body completed exactly once.

`--mode celery` runs the same without the hook or beat, with `task_acks_late`: Celery's
own redelivery, for comparison (RabbitMQ requeues the message when the connection drops;
nothing stops a second copy from running).

`--load SECONDS` measures the store load instead: beat alone idles for that long, then a
prefork worker runs `--tasks` windows at once (each pool child renews its own run's lease)
for as long, and the committed transactions of the benchmark's own database are counted
(`pg_stat_database.xact_commit` deltas), and the updates of dispatch rows, which are the
lease renewals (`pg_stat_user_tables.n_tup_upd`): per second, per beat and per task.

`--code FOLDER` runs beat and the workers on another checkout (an older version,
unpacked with `git archive`), to compare.

The settings are the library's defaults unless `--lease` or `--claim-timeout` set them
(`SAFEBEAT_EXECUTION_LEASE`, `SAFEBEAT_CLAIM_TIMEOUT`).

What it needs: PostgreSQL, and RabbitMQ (or Redis with `--broker redis`), found the way
the tests find them (tests/services.py). It creates its own database and drops it.

How to run it (from the repository root):

    .venv/bin/python tests/benchmarks/bench_recovery.py --repeats 5
    .venv/bin/python tests/benchmarks/bench_recovery.py --repeats 5 --acks early
    .venv/bin/python tests/benchmarks/bench_recovery.py --repeats 5 --mode celery
    .venv/bin/python tests/benchmarks/bench_recovery.py --load 60 --tasks 4

Nothing here passes or fails on a number.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import redis
from kombu import Connection, Exchange, Queue

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere, not only via the editable install
    sys.path.insert(0, str(ROOT))

from safebeat.stores.postgres import PostgresStore  # noqa: E402
from safebeat.stores.protocols import Store  # noqa: E402
from tests import services  # noqa: E402 - needs ROOT on sys.path
from tests.acceptance.harness import Cluster, kill_tree  # noqa: E402
from tests.acceptance.test_workers import claim_window, publish  # noqa: E402

APP = "tests.acceptance.workerapp"


def traces(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in folder.glob("*.json")]


def wait(condition: Any, what: str, timeout: float, cluster: Cluster) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {timeout:.0f}s\n{cluster.logs()}")
        time.sleep(0.05)


def ready_at(cluster: Cluster, index: int) -> float | None:
    log = cluster.logfiles[index]
    return time.time() if log.exists() and " ready." in log.read_text() else None


@contextmanager
def database() -> Iterator[str]:
    admin, name = services.postgres_admin_url(), f"bench_recovery_{uuid.uuid4().hex[:8]}"
    url = services.create_database(admin, name)
    try:
        yield url
    finally:
        services.drop_database(admin, name)


def broker_url(kind: str) -> str:
    if kind == "redis":
        return services.redis_url()
    url = services.amqp_url()
    if url is None:
        raise SystemExit("no RabbitMQ found (tests/services.py amqp_url); try --broker redis")
    return url


def cluster_for(args: argparse.Namespace, workdir: Path, store_url: str, namespace: str) -> Cluster:
    (workdir / "traces").mkdir(exist_ok=True)
    env = {
        "SAFEBEAT_URL": store_url,
        "SAFEBEAT_NAMESPACE": namespace,
        "SB_TRACES": str(workdir / "traces"),
        "SB_SCHEDULE": json.dumps({"job": {"seconds": 3600, "sleep": args.sleep}}),
        "SB_ACKS_LATE": "1" if args.acks == "late" or args.mode == "celery" else "0",
        "SB_HOOK": "0" if args.mode == "celery" else "1",
    }
    if args.lease is not None:
        env["SAFEBEAT_EXECUTION_LEASE"] = str(args.lease)
    if args.claim_timeout is not None:
        env["SAFEBEAT_CLAIM_TIMEOUT"] = str(args.claim_timeout)
    return Cluster(
        workdir=workdir,
        broker_url=broker_url(args.broker),
        queue=f"bench-recovery-{namespace}",
        schedule={},
        app=APP,
        env=env,
        pythonpath=args.code or str(ROOT),
    )


def remove_queue(cluster: Cluster) -> None:
    """The repeat's queue, and on Redis the keys of its unacknowledged messages."""
    if cluster.broker_url.startswith("redis"):
        keys = (f"{cluster.queue}.{key}" for key in ("unacked", "unacked_index", "unacked_mutex"))
        redis.Redis.from_url(cluster.broker_url).delete(cluster.queue, *keys)
        return
    with Connection(cluster.broker_url) as conn:
        channel = conn.default_channel
        Queue(cluster.queue, Exchange(cluster.queue), routing_key=cluster.queue)(channel).delete()
        Exchange(cluster.queue)(channel).delete()


def one_kill(args: argparse.Namespace, store_url: str) -> dict[str, Any]:
    """One repeat: publish a window, kill its worker mid-run, time the recovery."""
    namespace = f"rec{uuid.uuid4().hex[:8]}"
    store: Store = PostgresStore(store_url)
    with tempfile.TemporaryDirectory() as folder:
        workdir = Path(folder)
        cluster = cluster_for(args, workdir, store_url, namespace)
        claim = claim_window(store, namespace, "job")
        if args.mode == "hook":
            cluster.start(1)  # beat: index 0
        cluster.start_workers(1, pool=args.pool, concurrency=1)
        first = len(cluster.processes) - 1
        try:
            cluster.wait_started()
            publish(cluster.broker_url, cluster.queue, claim, copies=1, sleep=args.sleep)
            store.record_publish(namespace, [claim.id], {})  # as beat confirms a publish
            wait(
                lambda: (
                    store.history(namespace, limit=1)[0].started_at is not None
                    if args.mode == "hook"
                    else "workers.record" in cluster.logfiles[first].read_text()
                ),
                "the first run starting",
                60,
                cluster,
            )
            time.sleep(random.uniform(2.0, 8.0))
            kill_tree(cluster.processes[first].pid)
            killed = time.time()
            cluster.start_workers(1, pool=args.pool, concurrency=1)
            fresh = len(cluster.processes) - 1
            ready = wait(lambda: ready_at(cluster, fresh), "the fresh worker", 60, cluster)
            runs = wait(
                lambda: traces(workdir / "traces"),
                "the window completing",
                args.sleep + 120,
                cluster,
            )
            time.sleep(2.0)  # a second copy wrongly run beside it would leave its trace too
            runs = traces(workdir / "traces")
        finally:
            cluster.stop()
            store.close()
            remove_queue(cluster)
    first_run = min(runs, key=lambda t: t["started"])
    return {
        "ready": ready - killed,
        "restart": first_run["started"] - killed,
        "done": first_run["finished"] - killed,
        "completions": len(runs),
    }


def recovery(args: argparse.Namespace) -> None:
    label = "celery acks late, no hook" if args.mode == "celery" else f"hook, acks {args.acks}"
    settings = f"lease={args.lease or 'default'} claim_timeout={args.claim_timeout or 'default'}"
    print(f"recovery: {label}, {args.broker} broker, {args.pool} pool, {settings}")
    print(f"task sleeps {args.sleep:.0f}s; seconds after the SIGKILL:")
    results = []
    with database() as store_url:
        PostgresStore(store_url).migrate()
        for repeat in range(args.repeats):
            result = one_kill(args, store_url)
            results.append(result)
            print(
                f"  #{repeat + 1}: fresh worker ready {result['ready']:5.1f}  "
                f"restart {result['restart']:5.1f}  done {result['done']:5.1f}  "
                f"completions {result['completions']}",
                flush=True,
            )
    for key in ("restart", "done"):
        values = [r[key] for r in results]
        print(
            f"{key}: min {min(values):.1f}  median {statistics.median(values):.1f}  "
            f"max {max(values):.1f}"
        )
    print(f"completed exactly once: {sum(r['completions'] == 1 for r in results)}/{len(results)}")


def counts(store_url: str) -> tuple[int, int]:
    """The database's committed transactions, and the updates of dispatch rows (a lease
    renewal updates one row per run; a take-over, a start or an end one too)."""
    with psycopg.connect(store_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT (SELECT xact_commit FROM pg_stat_database"
            "        WHERE datname = current_database()),"
            "       (SELECT n_tup_upd FROM pg_stat_user_tables"
            "        WHERE relname = 'safebeat_dispatch')"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


#: A busy backend reports its counts to the statistics at most every second, an idle one
#: up to 10 s late: what started a phase is reported before its count begins.
STATS_LAG = 11.0


def counted(store_url: str, seconds: float) -> tuple[float, float]:
    """Committed transactions and dispatch row updates per second over `seconds`, counted
    from STATS_LAG on, so the start of a phase (connections, migrations, the tasks'
    starts) is not in it; in a steady state the lag is the same at both ends."""
    time.sleep(STATS_LAG)
    commits, updates = counts(store_url)
    time.sleep(seconds)
    commits_after, updates_after = counts(store_url)
    # less our own first read, which commits too
    return (commits_after - commits - 1) / seconds, (updates_after - updates) / seconds


def load(args: argparse.Namespace) -> None:
    settings = f"lease={args.lease or 'default'} claim_timeout={args.claim_timeout or 'default'}"
    print(f"store load, {settings}, {args.load:.0f}s each")
    with database() as store_url:
        PostgresStore(store_url).migrate()
        store: Store = PostgresStore(store_url)
        namespace = f"load{uuid.uuid4().hex[:8]}"
        with tempfile.TemporaryDirectory() as folder:
            workdir = Path(folder)
            args.sleep = args.load + 60
            cluster = cluster_for(args, workdir, store_url, namespace)
            cluster.start(1)
            try:
                cluster.wait_started()
                idle_beat, idle_updates = counted(store_url, args.load)
                cluster.start_workers(1, pool="prefork", concurrency=args.tasks)
                cluster.wait_started()
                for index in range(args.tasks):
                    claim = claim_window(store, namespace, f"job{index}")
                    publish(cluster.broker_url, cluster.queue, claim, copies=1, sleep=args.sleep)
                    store.record_publish(namespace, [claim.id], {})
                with_tasks, updates = counted(store_url, args.load)
            finally:
                cluster.stop()
                store.close()
                remove_queue(cluster)
    per_task = (with_tasks - idle_beat) / args.tasks
    renewals = (updates - idle_updates) / args.tasks
    print(f"beat alone (one replica, idle): {idle_beat:.2f} transactions/s")
    print(f"beat and {args.tasks} running tasks (one per pool child): {with_tasks:.2f}/s")
    print(f"per running task: {per_task:.3f} transactions/s, {renewals:.3f} renewals/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mode", choices=("hook", "celery"), default="hook")
    parser.add_argument("--acks", choices=("late", "early"), default="late")
    parser.add_argument("--broker", choices=("rabbitmq", "redis"), default="rabbitmq")
    parser.add_argument("--pool", choices=("prefork", "solo", "threads"), default="prefork")
    parser.add_argument("--sleep", type=float, default=20.0, help="the task's own seconds")
    parser.add_argument("--lease", type=float, default=None, help="safebeat_execution_lease")
    parser.add_argument("--claim-timeout", type=float, default=None)
    parser.add_argument("--load", type=float, default=None, help="measure the store load")
    parser.add_argument("--tasks", type=int, default=4, help="running tasks for --load")
    parser.add_argument(
        "--code",
        default=None,
        help="run beat and the workers on the safebeat checkout in this folder (an older "
        "version, to compare; e.g. from `git archive`)",
    )
    args = parser.parse_args()
    if args.load is not None:
        load(args)
    else:
        recovery(args)


if __name__ == "__main__":
    main()
