"""Sentry Crons with three real beat replicas and a worker: one check-in pair per window.

Every process loads `tests.acceptance.sentryapp`, which initialises the real sentry_sdk
with `CeleryIntegration(monitor_beat_tasks=True)` and a transport that writes each
check-in to a file instead of sending it.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from safebeat.stores.protocols import Status
from safebeat.stores.sqlite import SqliteStore
from tests import runscope
from tests.acceptance.harness import Cluster

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]

MONITORED = {"every-minute", "cron-moscow"}


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = runscope.unique("sentry")
    yield name
    redis.Redis.from_url(redis_url).delete(name)


def check_ins(folder: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(folder.glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def monitored(store: SqliteStore, namespace: str) -> list[Any]:
    """The windows of monitored entries that were sent."""
    rows = store.history(namespace, limit=1000)
    return [r for r in rows if r.entry in MONITORED and r.status is Status.SENT]


def finished(store: SqliteStore, namespace: str) -> list[Any]:
    """The windows of monitored entries that were sent and have run."""
    return [r for r in monitored(store, namespace) if r.finished_at is not None]


def wait_until(done: Callable[[], bool], processes: Cluster, timeout: float = 150) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, processes.logs()
        time.sleep(0.5)


def test_three_replicas_and_a_worker_report_one_check_in_pair_per_window(
    tmp_path: Path, redis_url: str, queue: str
) -> None:
    """Each window sent has exactly one in-progress check-in (from the beat that claimed
    it) and one ok or error (from the worker) under the same id, with the entry's slug and
    schedule; an entry Sentry cannot describe runs unmonitored."""
    folder = tmp_path / "checkins"
    folder.mkdir()
    namespace = runscope.unique("sentry")
    url = f"sqlite:///{tmp_path / 'safebeat.sqlite3'}"
    processes = Cluster(
        workdir=tmp_path,
        broker_url=redis_url,
        queue=queue,
        schedule={},
        app="tests.acceptance.sentryapp",
        env={"SAFEBEAT_URL": url, "SAFEBEAT_NAMESPACE": namespace, "SB_CHECKINS": str(folder)},
    )
    store = SqliteStore(url)
    store.migrate()
    try:
        processes.start(3)
        processes.start_workers(1)
        processes.wait_started()
        # Until each monitored entry had a window run, then until every window sent ran.
        wait_until(lambda: {r.entry for r in finished(store, namespace)} >= MONITORED, processes)
        for index in range(3):
            processes.signal(index, signal.SIGTERM)
        wait_until(lambda: monitored(store, namespace) == finished(store, namespace), processes)
        sent = monitored(store, namespace)
        reported = check_ins(folder)
    finally:
        processes.stop()
        store.close()
    expected = {uuid.UUID(r.task_id).hex: r for r in sent}
    assert len(expected) >= len(MONITORED)
    started = [c for c in reported if c["status"] == "in_progress"]
    ended = [c for c in reported if c["status"] != "in_progress"]
    assert Counter(c["check_in_id"] for c in started) == Counter(dict.fromkeys(expected, 1))
    assert {c["role"] for c in started} == {"beat"}
    assert {c["role"] for c in ended} == {"worker"}
    assert Counter(c["check_in_id"] for c in ended) == Counter(dict.fromkeys(expected, 1))
    for check_in in reported:
        row = expected[check_in["check_in_id"]]
        assert check_in["monitor_slug"] == row.entry
        if row.entry == "every-minute":
            assert check_in["status"] in {"in_progress", "ok"}
            assert check_in["monitor_config"] == {
                "schedule": {"type": "interval", "value": 1, "unit": "minute"},
                "timezone": "UTC",
            }
        else:
            assert check_in["status"] in {"in_progress", "error"}
            assert check_in["monitor_config"] == {
                "schedule": {"type": "crontab", "value": "* * * * *"},
                "timezone": "Europe/Moscow",
            }
    assert not any(c["monitor_slug"] == "fast" for c in reported)
