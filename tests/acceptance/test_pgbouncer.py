"""Real beats, a worker and the CLI on PostgreSQL through PgBouncer in transaction mode.

PgBouncer (Debian's `pgbouncer`, started by the `pgbouncer` fixture on a free loopback
port) pools the test PostgreSQL with two server connections: fewer than the three beats,
let alone the worker's processes, so transactions of different processes take turns on
the same server connections. Everything safebeat does goes through the pooler: the beats
migrate a fresh database and tick, the worker hook records each run, the CLI reads. The
test's own checks read the database directly, past the pooler.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from safebeat.errors import StoreError
from safebeat.identity import parse_window
from safebeat.stores.postgres import PostgresStore
from safebeat.stores.protocols import Outcome, Status
from tests import runscope, services
from tests.acceptance.harness import (
    ROOT,
    Cluster,
    Message,
    redis_messages,
    safebeat_messages,
    verify,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres, pytest.mark.xdist_group("acceptance")]

APP = "tests.acceptance.workerapp"
CLAIM_TIMEOUT = 2.0
#: Seconds of schedule the run covers (one beat is killed halfway).
RUN = 12.0
#: `job` is run by the worker; the others go to a queue nobody consumes, counted there.
WORKED = "job"


@pytest.fixture
def pooled_db(pg_admin_url: str, pgbouncer: services.PgBouncer) -> Iterator[tuple[str, str]]:
    """A fresh, unmigrated database of this test's own: (direct URL, URL through the pooler)."""
    name = runscope.database(f"pgbouncer_{uuid.uuid4().hex[:10]}")
    direct = services.create_database(pg_admin_url, name)
    yield direct, pgbouncer.url(name)
    services.drop_database(pg_admin_url, name)


@pytest.fixture
def queues(redis_url: str) -> Iterator[tuple[str, str]]:
    """(the worker's queue, the queue left on the broker to count)."""
    worked, counted = runscope.unique("pgbouncer-work"), runscope.unique("pgbouncer-count")
    yield worked, counted
    client = redis.Redis.from_url(redis_url)
    client.delete(worked, counted, *(f"{worked}.{key}" for key in ("unacked", "unacked_index")))


def wait_for_schedule_time(
    store: PostgresStore, namespace: str, names: set[str], seconds: float, timeout: float = 90
) -> datetime:
    """Wait until `seconds` of the schedule have passed on the store's clock, counted from
    the registration of every entry (after the beats migrated); return that clock."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            states = store.states(namespace)
        except StoreError:  # the beats have not migrated the fresh database yet
            states = {}
        if names <= states.keys():
            origin = max(states[name].defined_at for name in names)
            now = store.clock()
            if now >= origin + timedelta(seconds=seconds):
                return now
        assert time.monotonic() < deadline, f"{seconds} s of schedule did not pass in {timeout} s"
        time.sleep(0.2)


def worked_windows_finished(
    store: PostgresStore, namespace: str, until: datetime, processes: Cluster
) -> None:
    """Wait until the worker finished every window of `job` up to `until`."""
    deadline = time.monotonic() + 30
    while True:
        rows = [r for r in store.history(namespace, WORKED, limit=1000) if r.window <= until]
        if rows and all(r.finished_at is not None for r in rows):
            return
        assert time.monotonic() < deadline, f"runs never finished: {rows}\n{processes.logs()}"
        time.sleep(0.2)


def cli(env: dict[str, str], *args: str) -> Any:
    """Run `safebeat -A workerapp ARGS --json` as an operator would; its parsed output."""
    done = subprocess.run(
        [sys.executable, "-m", "safebeat", "-A", APP, *args, "--json"],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def ran(tmp_path: Path) -> list[Message]:
    """What the worker ran, one message per execution (from the task's traces)."""
    traces = [json.loads(p.read_text()) for p in (tmp_path / "traces").glob("*.json")]
    return [Message(t["entry"], parse_window(t["window"]), t["task_id"]) for t in traces]


def test_beats_worker_and_cli_through_pgbouncer_transaction_pooling(  # noqa: PLR0917 - fixtures
    tmp_path: Path,
    pooled_db: tuple[str, str],
    pgbouncer: services.PgBouncer,
    redis_url: str,
    queues: tuple[str, str],
    namespace: str,
) -> None:
    """Three beats, a worker with the hook and the CLI, all through PgBouncer in transaction
    mode with two server connections, one beat SIGKILLed mid-run: every window reaches the
    broker once, none is missing, every run of the worked entry is recorded started and
    finished, and `safebeat status` and `history` read it all back through the pooler."""
    direct_url, pooled_url = pooled_db
    worked_queue, counted_queue = queues
    schedule = {WORKED: 1.0, "every-1s": 1.0, "every-2s": 2.0, "every-3s": 3.0}
    specs: dict[str, dict[str, Any]] = {
        name: {"seconds": seconds, **({} if name == WORKED else {"queue": counted_queue})}
        for name, seconds in schedule.items()
    }
    specs[WORKED]["sleep"] = 0.2
    (tmp_path / "traces").mkdir()
    env = {
        "SAFEBEAT_URL": pooled_url,
        "SAFEBEAT_NAMESPACE": namespace,
        "SAFEBEAT_CLAIM_TIMEOUT": f"{CLAIM_TIMEOUT:g}",
        "SAFEBEAT_LOCK_TIMEOUT": "1",
        "SB_TRACES": str(tmp_path / "traces"),
        "SB_SCHEDULE": json.dumps(specs),
    }
    processes = Cluster(tmp_path, redis_url, worked_queue, schedule={}, app=APP, env=env)
    store = PostgresStore(direct_url)  # the test's own view, past the pooler
    processes.start(3)  # processes 0-2: the beats, which migrate the fresh database
    processes.start_workers(1, pool="prefork", concurrency=2)
    try:
        processes.wait_started()
        wait_for_schedule_time(store, namespace, set(schedule), RUN / 2)
        processes.signal(0, signal.SIGKILL)
        end = wait_for_schedule_time(store, namespace, set(schedule), RUN + CLAIM_TIMEOUT + 2)
        complete_until = end - timedelta(seconds=CLAIM_TIMEOUT + 2)
        worked_windows_finished(store, namespace, complete_until, processes)
        status = cli({**env, "SB_BROKER_URL": redis_url, "SB_QUEUE": worked_queue}, "status")
        history = cli(
            {**env, "SB_BROKER_URL": redis_url, "SB_QUEUE": worked_queue},
            "history",
            WORKED,
            "--limit",
            "1000",
        )
    finally:
        processes.stop()
    logs = processes.logs()

    # Every window once on the broker: the counted entries on their queue, `job` as run.
    messages = safebeat_messages(redis_messages(redis_url, counted_queue)) + ran(tmp_path)
    verdict = verify(store, namespace, schedule, messages, complete_until)
    verdict.assert_exactly_once(logs)
    assert verdict.expected >= 2 * RUN, verdict
    rows = store.history(namespace, limit=100_000)
    # A copy of `job` the hook skipped may only be a re-published claim (same task id).
    assert [r for r in rows if r.duplicates and r.attempts == 1] == [], logs
    worked = [r for r in rows if r.entry == WORKED and r.window <= complete_until]
    for row in worked:
        assert row.status is Status.SENT, row
        assert (row.outcome, row.runs) == (Outcome.SUCCESS, 1), row
        assert row.started_at is not None, row
        assert row.finished_at is not None, row
        assert row.worker is not None, row
        assert row.worker.startswith("worker3@"), row
    # Nothing failed on the way, even where a retry would have hidden it from the count.
    failures = [
        line
        for line in processes.logs(lines=1_000_000).splitlines()
        if any(mark in line for mark in (": ERROR/", ": CRITICAL/", "Traceback", "prepared"))
    ]
    assert failures == [], logs

    # The CLI, through the pooler, says what the database holds.
    assert status["store"] == pooled_url, status
    assert status["namespace"] == namespace
    assert {e["entry"] for e in status["entries"]} == set(schedule)
    assert all(e["last_sent_window"] is not None for e in status["entries"]), status
    assert len(status["replicas"]) == 3, status["replicas"]
    live = {r["replica"] for r in status["replicas"] if r["live"]}
    survivors = {str(p.pid) for p in processes.processes[1:3]}
    assert {replica.split(":")[1] for replica in live} >= survivors, status["replicas"]
    shown = {
        (parse_window(r["window"]), r["task_id"], r["outcome"])
        for r in history
        if parse_window(r["window"]) <= complete_until
    }
    assert shown == {(r.window, r.task_id, "success") for r in worked}, history
    assert pgbouncer.process.poll() is None, pgbouncer.log()
    store.close()
