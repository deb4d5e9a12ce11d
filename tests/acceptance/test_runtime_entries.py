"""Entries added and removed at run time under three real `celery beat` replicas.

The replicas run the app's `beat_schedule`; while they run, `safebeat.schedules.add`
stores two more entries (an interval and a crontab with seconds), and later removes one
of them. Counted on the broker: every window of every entry once, the added entries'
windows starting within about a second of the add and the removed one's ending within
about a second of its removal.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import redis
from celery import Celery

import safebeat.schedules
from safebeat.stores.postgres import PostgresStore
from safebeat.stores.protocols import Store
from tests import runscope
from tests.acceptance.harness import redis_messages, safebeat_cluster, safebeat_messages, verify

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]

SCHEDULE = {"every-2s": 2.0}
CLAIM_TIMEOUT = 2.0
#: How long after a change a replica may still run the old entries: one look (1 s), one
#: tick, and a loaded machine.
PICKUP = timedelta(seconds=3)


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = runscope.unique("runtime")
    yield name
    redis.Redis.from_url(redis_url).delete(name)


def wait_until(store: Store, instant: datetime, timeout: float = 60) -> None:
    """Wait until the store's clock reaches `instant`."""
    deadline = time.monotonic() + timeout
    while store.clock() < instant:
        assert time.monotonic() < deadline, f"the store clock did not reach {instant}"
        time.sleep(0.2)


def wait_registered(store: Store, namespace: str, names: set[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not names <= store.states(namespace).keys():
        assert time.monotonic() < deadline, f"{names} were not registered in {timeout} s"
        time.sleep(0.2)


def test_entries_added_and_removed_under_three_replicas_send_each_window_once(
    tmp_path: Path, pg_url: str, redis_url: str, queue: str, namespace: str
) -> None:
    """Added entries are sent by the running replicas from within seconds of the add, each
    window once; a removed entry stops within seconds; the code's entry is unaffected."""
    store = PostgresStore(pg_url)
    app = Celery("runtime", broker=redis_url, set_as_current=False)
    app.conf.update(
        safebeat_url=pg_url,
        safebeat_namespace=namespace,
        result_expires=None,
        beat_scheduler="safebeat.Scheduler",  # no django-celery-beat rows, whatever Django
        beat_schedule={"every-2s": {"task": "acceptance.every-2s", "schedule": 2.0}},
    )
    beats = safebeat_cluster(
        tmp_path,
        broker_url=redis_url,
        queue=queue,
        schedule=SCHEDULE,
        store_url=pg_url,
        namespace=namespace,
        claim_timeout=CLAIM_TIMEOUT,
    )
    beats.start(3)
    try:
        beats.wait_started()
        wait_registered(store, namespace, set(SCHEDULE))
        added_at = store.clock()
        safebeat.schedules.add(app, "added-1s", "acceptance.added", 1, store=store)
        safebeat.schedules.add(app, "added-cron", "acceptance.cron", "*/2 * * * * *", store=store)
        wait_registered(store, namespace, {"added-1s", "added-cron"})
        wait_until(store, added_at + timedelta(seconds=8))
        assert safebeat.schedules.remove(app, "added-1s", store=store)
        removed_at = store.clock()
        end = removed_at + timedelta(seconds=6)
        wait_until(store, end)
    finally:
        beats.stop()
    messages = safebeat_messages(redis_messages(redis_url, queue))
    logs = beats.logs()

    code = [m for m in messages if m.entry in SCHEDULE]
    verdict = verify(
        store, namespace, SCHEDULE, code, complete_until=end - timedelta(seconds=CLAIM_TIMEOUT + 2)
    )
    verdict.assert_exactly_once(logs)

    copies = Counter((m.entry, m.window) for m in messages)
    assert max(copies.values()) == 1, f"windows sent twice: {copies.most_common(3)}\n{logs}"
    interval = sorted(m.window for m in messages if m.entry == "added-1s")
    assert interval, logs
    assert interval[0] <= added_at + PICKUP, (interval[0], added_at)
    assert interval[-1] <= removed_at + PICKUP, (interval[-1], removed_at)
    assert interval[-1] >= removed_at - PICKUP, (interval[-1], removed_at)
    steps = {later - earlier for earlier, later in itertools.pairwise(interval)}
    assert steps == {timedelta(seconds=1)}, f"windows missing between: {sorted(steps)}"
    cron = sorted(m.window for m in messages if m.entry == "added-cron")
    assert cron[0] <= added_at + PICKUP
    assert cron[-1] >= end - PICKUP
    assert all(w.second % 2 == 0 and w.microsecond == 0 for w in cron), cron
    steps = {later - earlier for earlier, later in itertools.pairwise(cron)}
    assert steps == {timedelta(seconds=2)}, f"windows missing between: {sorted(steps)}"
    store.close()
