"""`pause_after_failures` with real processes: three `celery beat` replicas and a worker
with safebeat's hook, on PostgreSQL, running an entry whose task always raises."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from safebeat.record_rules import consecutive_failures
from safebeat.records import Outcome, Status
from safebeat.stores.postgres import PostgresStore
from tests import runscope
from tests.acceptance.harness import Cluster

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]

ENTRY = "always-fails"
THRESHOLD = 3


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = runscope.unique("failing")
    yield name
    redis.Redis.from_url(redis_url).delete(name)


def test_an_entry_that_keeps_failing_is_paused_for_every_replica(
    tmp_path: Path, pg_url: str, redis_url: str, queue: str, namespace: str
) -> None:
    """After three failed runs in a row the worker pauses the entry: no replica sends it
    again (its windows are skipped as paused), each window ran at most once, and the
    worker logged why once."""
    store = PostgresStore(pg_url)
    processes = Cluster(
        workdir=tmp_path,
        broker_url=redis_url,
        queue=queue,
        schedule={},
        app="tests.acceptance.failingapp",
        env={
            "SAFEBEAT_URL": pg_url,
            "SAFEBEAT_NAMESPACE": namespace,
            "SB_SECONDS": "1",
            "SB_PAUSE_AFTER": str(THRESHOLD),
        },
    )
    processes.start(3)
    processes.start_workers(1)
    try:
        processes.wait_started()
        deadline = time.monotonic() + 60
        while not (state := store.states(namespace).get(ENTRY)) or not state.paused:
            assert time.monotonic() < deadline, "never paused:\n" + processes.logs()
            time.sleep(0.2)
        paused_seen = store.clock()
        wait = paused_seen + timedelta(seconds=5)
        while store.clock() < wait:
            time.sleep(0.2)
    finally:
        processes.stop()
    history = store.history(namespace, ENTRY, limit=1000)
    runs = [r for r in history if r.status is not Status.SKIPPED]
    assert Counter(r.window for r in history).most_common(1)[0][1] == 1
    failed = [r for r in runs if r.outcome is Outcome.FAILURE]
    assert len(failed) >= THRESHOLD, processes.logs()
    assert all(r.outcome in {Outcome.FAILURE, None} for r in runs)
    assert all(r.runs <= 1 for r in runs), "a window ran twice"
    # Once the pause was seen, windows are skipped as paused, not sent (one in flight at
    # the moment of the pause may still have been claimed).
    late = [r for r in runs if r.window > paused_seen + timedelta(seconds=2)]
    assert late == [], late
    skipped = [r for r in history if r.reason == "paused"]
    assert skipped, processes.logs()
    assert consecutive_failures([r for r in history if r.reason != "paused"]) >= THRESHOLD
    worker_log = (tmp_path / "worker-3.log").read_text()
    assert worker_log.count(f"entry {ENTRY!r} paused after") == 1, worker_log[-3000:]
    store.close()
