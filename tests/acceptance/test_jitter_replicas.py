"""Deterministic jitter under real `celery beat -S safebeat.Scheduler` replicas.

Three beats share one store; one entry has a jitter longer than its period. Each window
must reach the broker once, under its own window and task id, and never before its send
time (the window plus the offset every replica computes alike).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from safebeat.stores.protocols import Status
from safebeat.stores.sqlite import SqliteStore
from safebeat.windows import Jitter
from tests import runscope
from tests.acceptance.harness import Cluster, redis_messages, safebeat_messages, verify

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]

SCHEDULE = {"every-1s": 1.0, "jittered-every-2s": 2.0}
JITTER = timedelta(seconds=3)


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = runscope.unique("acceptance")
    yield name
    redis.Redis.from_url(redis_url).delete(name)


def test_replicas_send_each_jittered_window_once_at_its_send_time(
    tmp_path: Path, redis_url: str, queue: str, namespace: str
) -> None:
    """Every window once; a jittered one is published at or after window + offset, with
    the task id of the window itself, and the offsets spread over the jitter."""
    url = f"sqlite:///{tmp_path}/safebeat.sqlite3"
    store = SqliteStore(url)
    store.migrate()
    beats = Cluster(
        workdir=tmp_path,
        broker_url=redis_url,
        queue=queue,
        schedule=SCHEDULE,
        env={
            "SAFEBEAT_URL": url,
            "SAFEBEAT_NAMESPACE": namespace,
            # misfire "all": a beat the machine held up past a send time sends the window
            # late rather than coalescing it into the next (what `latest` is for).
            "SB_SAFEBEAT_OPTIONS": json.dumps(
                {"jittered-every-2s": {"jitter": "3s", "misfire": "all"}}
            ),
        },
    )
    beats.start(3)
    try:
        beats.wait_started()
        time.sleep(12)
        end = store.clock()
    finally:
        beats.stop()
    messages = safebeat_messages(redis_messages(redis_url, queue))
    # Jittered windows of the last 3 s may still have been waiting for their send time.
    verdict = verify(store, namespace, SCHEDULE, messages, complete_until=end - JITTER * 2)
    verdict.assert_exactly_once(beats.logs())
    jitter = Jitter(JITTER, f"{namespace}/jittered-every-2s")
    rows = [
        r
        for r in store.history(namespace, "jittered-every-2s", limit=1000)
        if r.status is Status.SENT
    ]
    assert len(rows) >= 3, beats.logs()
    for row in rows:
        assert row.sent_at is not None
        assert row.claimed_at >= jitter.send_time(row.window), (row.window, row.claimed_at)
        assert row.task_id == next(
            m.task_id for m in messages if (m.entry, m.window) == (row.entry, row.window)
        )
    offsets = {jitter.offset(row.window) // timedelta(milliseconds=100) for row in rows}
    assert len(offsets) > 1, "every window got the same offset"
    store.close()
