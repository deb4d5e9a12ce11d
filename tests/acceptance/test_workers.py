"""Real `celery worker` processes with safebeat's hook: duplicates skipped, forbid across workers.

The workers run `tests.acceptance.workerapp`; each execution of its task leaves a trace
file, so the tests count what really ran, next to what the store recorded.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from datetime import timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from safebeat.beat.message_fields import message_for
from safebeat.config import Config
from safebeat.entries import compile_entry
from safebeat.identity import Replica, task_id_for
from safebeat.stores.postgres import PostgresStore
from safebeat.stores.protocols import (
    Claim,
    DispatchRecord,
    NewClaim,
    Outcome,
    Status,
    Store,
    TickPlan,
)
from safebeat.stores.redis import RedisStore
from safebeat.stores.sqlite import SqliteStore
from tests import runscope
from tests.acceptance.harness import Cluster

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]

APP = "tests.acceptance.workerapp"
DEAD_REPLICA = Replica("dead-beat", 4242, "dead00")


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = runscope.unique("workers")
    yield name
    redis.Redis.from_url(redis_url).delete(name)


def cluster(
    tmp_path: Path,
    broker_url: str,
    queue: str,
    *,
    store_url: str,
    namespace: str,
    schedule: dict[str, Any] | None = None,
    **env: str,
) -> Cluster:
    (tmp_path / "traces").mkdir(exist_ok=True)
    return Cluster(
        workdir=tmp_path,
        broker_url=broker_url,
        queue=queue,
        schedule={},
        app=APP,
        env={
            "SAFEBEAT_URL": store_url,
            "SAFEBEAT_NAMESPACE": namespace,
            "SB_TRACES": str(tmp_path / "traces"),
            "SB_SCHEDULE": json.dumps(schedule or {}),
            **env,
        },
    )


def traces(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in (tmp_path / "traces").glob("*.json")]


def claim_as_dead_replica(store: Store, namespace: str, new: list[NewClaim]) -> list[Claim]:
    """Claim `new` in a tick of a replica that then dies. A beat of the test's cluster may
    hold the tick lock at that moment (the tick then returns None): try again, for 30 s."""
    deadline = time.monotonic() + 30
    while True:
        result = store.tick(namespace, [], lambda n, s: TickPlan(claims=new), replica=DEAD_REPLICA)
        if result is not None:
            return list(result.claimed)
        assert time.monotonic() < deadline, "the tick lock stayed busy for 30 s"
        time.sleep(0.05)


def claim_window(store: Store, namespace: str, entry: str) -> Claim:
    """Claim a window of `entry` an hour back, as a beat replica would have."""
    window = store.clock().replace(microsecond=0) - timedelta(hours=1)
    task_id = task_id_for(namespace, entry, window)
    [claim] = claim_as_dead_replica(
        store, namespace, [NewClaim(entry, window, task_id, "workers.record")]
    )
    return claim


def publish(
    broker_url: str,
    queue: str,
    claim: Claim,
    *,
    copies: int,
    sleep: float,
    options: dict[str, Any] | None = None,
) -> None:
    """Publish the window's message `copies` times, exactly as beat publishes it."""
    raw = {
        "task": "workers.record",
        "schedule": 3600,
        "kwargs": {"sleep": sleep},
        "options": options or {},
    }
    entry = compile_entry(claim.entry, raw, app_timezone=timezone.utc, config=Config())
    args, kwargs, options = message_for(entry, claim)
    sender = Celery("publisher", broker=broker_url, set_as_current=False)
    with sender.producer_or_acquire() as producer:
        for _ in range(copies):
            sender.send_task(
                "workers.record", args, kwargs, producer=producer, queue=queue, **options
            )


def wait_for(
    store: Store,
    namespace: str,
    done: Callable[[DispatchRecord], bool],
    workers: Cluster,
    timeout: float = 30,
) -> DispatchRecord:
    deadline = time.monotonic() + timeout
    while True:
        rows = store.history(namespace, limit=10)
        if rows and done(rows[0]):
            return rows[0]
        assert time.monotonic() < deadline, f"never done: {rows}\n{workers.logs()}"
        time.sleep(0.2)


@pytest.mark.parametrize("pool", ["prefork:2", "threads:2", "solo:1"])
def test_duplicate_delivery_of_one_message_runs_once(
    tmp_path: Path, redis_url: str, queue: str, namespace: str, pool: str
) -> None:
    """The same message delivered twice runs its body once, on every pool; a copy that
    comes while the run lives is deferred, then skipped and counted once it finished."""
    url = f"sqlite:///{tmp_path}/safebeat.sqlite3"
    store = SqliteStore(url)
    store.migrate()
    claim = claim_window(store, namespace, "report")
    workers = cluster(
        tmp_path,
        redis_url,
        queue,
        store_url=url,
        namespace=namespace,
        SAFEBEAT_EXECUTION_LEASE="2",  # a deferred copy looks again 2 s later
    )
    name, concurrency = pool.split(":")
    workers.start_workers(1, pool=name, concurrency=int(concurrency))
    try:
        workers.wait_started()
        publish(redis_url, queue, claim, copies=2, sleep=0.5)
        row = wait_for(store, namespace, lambda r: r.duplicates >= 1 and r.finished_at, workers)
        time.sleep(0.5)  # let a wrongly run second copy leave its trace
    finally:
        workers.stop()
    ran = traces(tmp_path)
    assert [t["task_id"] for t in ran] == [claim.task_id], workers.logs()
    assert (ran[0]["entry"], row.outcome, row.runs, row.duplicates) == (
        "report",
        Outcome.SUCCESS,
        1,
        1,
    )
    assert row.worker is not None
    assert row.worker.startswith("worker0@")
    assert "duplicate delivery of entry 'report'" in workers.logs()
    store.close()


def test_republished_stale_claim_executes_once(
    tmp_path: Path, pg_url: str, redis_url: str, queue: str, namespace: str
) -> None:
    """A claim published but never confirmed is re-published by beat; the task still runs once."""
    store = PostgresStore(pg_url)
    claim = claim_window(store, namespace, "hourly")
    publish(redis_url, queue, claim, copies=1, sleep=0.5)  # the replica that died had sent it
    schedule = {"hourly": {"seconds": 3600}}
    processes = cluster(
        tmp_path,
        redis_url,
        queue,
        store_url=pg_url,
        namespace=namespace,
        schedule=schedule,
        SAFEBEAT_CLAIM_TIMEOUT="2",
        SAFEBEAT_EXECUTION_LEASE="2",
    )
    processes.start_workers(1)
    processes.start(1)
    try:
        processes.wait_started()
        row = wait_for(
            store,
            namespace,
            lambda r: r.status is Status.SENT and r.duplicates >= 1 and r.finished_at,
            processes,
        )
        time.sleep(0.5)
    finally:
        processes.stop()
    assert "re-publishing 1 claim(s)" in processes.logs()
    assert [t["task_id"] for t in traces(tmp_path)] == [claim.task_id]
    assert (row.attempts, row.runs, row.duplicates, row.outcome) == (2, 1, 1, Outcome.SUCCESS)
    store.close()


def test_forbid_holds_across_two_workers_with_a_long_task(
    tmp_path: Path, pg_url: str, redis_url: str, queue: str, namespace: str
) -> None:
    """An entry every second whose run takes 2 s never runs twice at once on two workers."""
    store = PostgresStore(pg_url)
    schedule = {"slow": {"seconds": 1, "sleep": 2.0, "overlap": "forbid"}}
    processes = cluster(
        tmp_path, redis_url, queue, store_url=pg_url, namespace=namespace, schedule=schedule
    )
    processes.start_workers(2)  # the second one is idle whenever the first runs
    processes.start(1)
    try:
        processes.wait_started()
        time.sleep(6.5)
    finally:
        processes.stop()  # warm shutdown: running tasks finish and leave their traces
    runs = sorted(traces(tmp_path), key=lambda t: t["started"])
    assert len(runs) >= 2, processes.logs()
    for before, after in itertools.pairwise(runs):
        assert after["started"] >= before["finished"], f"{before} overlaps {after}"
    skipped = [r for r in store.history(namespace, "slow", limit=100) if r.reason == "overlap"]
    assert skipped, "no window was skipped for overlap"
    assert all(r.status is Status.SKIPPED for r in skipped)
    store.close()


@pytest.mark.parametrize("pool", ["threads", "solo"])
def test_a_live_run_past_its_time_limit_is_never_run_twice(
    tmp_path: Path, redis_url: str, queue: str, namespace: str, pool: str
) -> None:
    """On pools that do not enforce time limits, a run that outlives its time_limit is
    alive while it renews its lease: a second copy delivered meanwhile waits, then is
    skipped; the body runs once."""
    url = f"sqlite:///{tmp_path}/safebeat.sqlite3"
    store = SqliteStore(url)
    store.migrate()
    claim = claim_window(store, namespace, "long")
    workers = cluster(
        tmp_path,
        redis_url,
        queue,
        store_url=url,
        namespace=namespace,
        SAFEBEAT_EXECUTION_LEASE="2",
    )
    workers.start_workers(2, pool=pool, concurrency=1)
    try:
        workers.wait_started()
        publish(redis_url, queue, claim, copies=1, sleep=5.0, options={"time_limit": 1})
        wait_for(store, namespace, lambda r: r.started_at is not None, workers)
        publish(redis_url, queue, claim, copies=1, sleep=5.0, options={"time_limit": 1})
        row = wait_for(store, namespace, lambda r: r.duplicates >= 1, workers)
        time.sleep(0.5)
    finally:
        workers.stop()
    assert [t["task_id"] for t in traces(tmp_path)] == [claim.task_id], workers.logs()
    assert (row.runs, row.outcome, row.duplicates) == (1, Outcome.SUCCESS, 1)
    assert "is running elsewhere (its lease is alive)" in workers.logs(200)
    store.close()


# --- a worker dies mid-run ------------------------------------------------------------

#: (how the run dies, acks_late, store). By default each way to die once, and each pair of
#: (acks late or early, store) once among them; SAFEBEAT_TEST_FULL_MATRIX=1 runs all 16.
KILL_MATRIX = [
    ("prefork parent", True, "postgres"),
    ("prefork child", False, "redis"),
    ("solo", False, "postgres"),
    ("threads", True, "redis"),
]
if os.environ.get("SAFEBEAT_TEST_FULL_MATRIX") == "1":
    KILL_MATRIX = [
        (kill, acks_late, store_kind)
        for kill in ("prefork parent", "prefork child", "solo", "threads")
        for acks_late in (True, False)
        for store_kind in ("postgres", "redis")
    ]
LEASE = 3  # seconds: short, so a dead run is noticed quickly


def pid_of(worker: str | None) -> int:
    """The process id in a row's `worker` (`nodename:pid`)."""
    assert worker is not None
    return int(worker.rsplit(":", 1)[1])


@pytest.mark.parametrize(
    "case",
    KILL_MATRIX,
    ids=[f"{k.replace(' ', '-')}-acks-{'late' if a else 'early'}-{s}" for k, a, s in KILL_MATRIX],
)
def test_a_window_whose_worker_dies_mid_run_completes_once(  # noqa: PLR0917 - fixtures
    request: pytest.FixtureRequest,
    tmp_path: Path,
    redis_url: str,
    queue: str,
    namespace: str,
    case: tuple[str, bool, str],
) -> None:
    """A worker (or pool child) killed while it runs a window: the window's task still
    completes, exactly once, within a lease and a reclaim pass of the kill."""
    kill, acks_late, store_kind = case
    store_url = request.getfixturevalue("pg_url") if store_kind == "postgres" else redis_url
    store: Store = PostgresStore(store_url) if store_kind == "postgres" else RedisStore(store_url)
    claim = claim_window(store, namespace, "job")
    processes = cluster(
        tmp_path,
        redis_url,
        queue,
        store_url=store_url,
        namespace=namespace,
        schedule={"job": {"seconds": 3600, "sleep": 3.0}},  # beat re-publishes "job" like this
        SAFEBEAT_EXECUTION_LEASE=str(LEASE),
        SAFEBEAT_CLAIM_TIMEOUT="2",  # a reclaim pass every second
        SB_ACKS_LATE="1" if acks_late else "0",
    )
    pool = kill.split(maxsplit=1)[0]
    processes.start(1)
    processes.start_workers(1, pool=pool, concurrency=1)
    try:
        processes.wait_started()
        publish(redis_url, queue, claim, copies=1, sleep=3.0)
        store.record_publish(namespace, [claim.id], {})  # as beat confirms a publish
        started = wait_for(store, namespace, lambda r: r.started_at is not None, processes)
        victim = pid_of(started.worker) if kill == "prefork child" else processes.processes[1].pid
        os.kill(victim, signal.SIGKILL)
        killed_at = store.clock()
        if kill != "prefork child":
            processes.start_workers(1, pool=pool, concurrency=1)  # the replacement worker
        done = wait_for(
            store, namespace, lambda r: r.outcome is Outcome.SUCCESS, processes, timeout=60
        )
        time.sleep(1.0)  # let a wrongly run second copy leave its trace
    finally:
        processes.stop()
    ran = [t for t in traces(tmp_path) if t["task_id"] == claim.task_id]
    assert len(ran) == 1, processes.logs()
    assert done.runs == 2, f"{done}\n{processes.logs()}"
    assert done.finished_at is not None
    took = (done.finished_at - killed_at).total_seconds()
    acks = "late" if acks_late else "early"
    print(f"{kill}, acks {acks}, {store_kind}: done {took:.1f}s after the kill")
    store.close()
