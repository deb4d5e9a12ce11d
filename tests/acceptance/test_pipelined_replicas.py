"""Three real beats whose ticks claim and publish in several pipelined rounds.

A few hundred entries fall due at the same instants, more than one claim round takes
(tests/acceptance/smallrounds.py: rounds of 20 doubling up to 100, each claimed while the one
before it is published). One replica is SIGKILLed mid-run, in the middle of such ticks: its
claimed-but-unpublished rounds are taken over after the claim timeout. Counted on the broker:
every window once, none missing, also after the kill. Which replica wins each tick's lock
is a race the test does not judge: one replica may well send every window.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import redis

from safebeat.stores.postgres import PostgresStore
from safebeat.stores.protocols import Store
from safebeat.stores.redis import RedisStore
from tests import runscope
from tests.acceptance.harness import (
    redis_messages,
    safebeat_cluster,
    safebeat_messages,
    verify,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]

ENTRIES = 300
EVERY = 3.0
SCHEDULE = {f"burst-{index:03d}": EVERY for index in range(ENTRIES)}
CLAIM_TIMEOUT = 4.0  # twice smallrounds' max_interval (1 s) and more: rounds are pipelined


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = runscope.unique("rounds")
    yield name
    redis.Redis.from_url(redis_url).delete(name)


def schedule_time(store: Store, namespace: str, seconds: float, timeout: float = 180) -> datetime:
    """Wait until `seconds` have passed on the store's clock since every entry was
    registered; return the store's clock then."""
    deadline = time.monotonic() + timeout
    while True:
        states = store.states(namespace)
        if len(states) == ENTRIES:
            origin = max(state.defined_at for state in states.values())
            now = store.clock()
            if now >= origin + timedelta(seconds=seconds):
                return now
        assert time.monotonic() < deadline, f"{seconds} s of schedule did not pass in {timeout} s"
        time.sleep(0.3)


@pytest.fixture(params=["postgres", "redis"])
def store_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue("pg_url" if request.param == "postgres" else "redis_url")
    return url


def test_three_replicas_claiming_in_rounds_send_each_window_once(
    tmp_path: Path, store_url: str, redis_url: str, queue: str, namespace: str
) -> None:
    store: Store = (
        PostgresStore(store_url) if store_url.startswith("postgres") else RedisStore(store_url)
    )
    beats = safebeat_cluster(
        tmp_path,
        broker_url=redis_url,
        queue=queue,
        schedule=SCHEDULE,
        store_url=store_url,
        namespace=namespace,
        claim_timeout=CLAIM_TIMEOUT,
        lock_timeout=2,
    )
    beats.start(3, scheduler="tests.acceptance.smallrounds.Scheduler")
    try:
        beats.wait_started()
        schedule_time(store, namespace, 3 * EVERY)
        beats.signal(0, signal.SIGKILL)
        end = schedule_time(store, namespace, 6 * EVERY + CLAIM_TIMEOUT + 2)
    finally:
        beats.stop()
    logs = beats.logs()
    verdict = verify(
        store,
        namespace,
        SCHEDULE,
        safebeat_messages(redis_messages(redis_url, queue)),
        complete_until=end - timedelta(seconds=CLAIM_TIMEOUT + 2),
    )
    verdict.assert_exactly_once(logs)
    assert verdict.expected >= 5 * ENTRIES
    assert "safebeat-test: a tick of" in logs, "no tick took more than one round\n" + logs
    store.close()
