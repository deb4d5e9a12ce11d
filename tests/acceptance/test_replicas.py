"""Several real `celery beat -S safebeat.Scheduler` processes, counted on a real broker.

Entries fire every 1-2 s. Each test runs for a few seconds of real time, then compares
every message on the broker with the windows each entry had: each window exactly once,
none missing, whatever happened to the replicas in between.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from safebeat.stores.postgres import PostgresStore
from safebeat.stores.protocols import Store
from safebeat.stores.redis import RedisStore
from safebeat.stores.sqlite import SqliteStore
from tests import runscope, services
from tests.acceptance.harness import (
    Cluster,
    Verdict,
    amqp_messages,
    redis_messages,
    safebeat_cluster,
    safebeat_messages,
    verify,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]

SCHEDULE = {"every-1s": 1.0, "every-2s": 2.0}
CLAIM_TIMEOUT = 2.0


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = runscope.unique("acceptance")
    yield name
    redis.Redis.from_url(redis_url).delete(name)


def cluster(tmp_path: Path, broker_url: str, queue: str, store_url: str, namespace: str) -> Cluster:
    return safebeat_cluster(
        tmp_path,
        broker_url=broker_url,
        queue=queue,
        schedule=SCHEDULE,
        store_url=store_url,
        namespace=namespace,
        claim_timeout=CLAIM_TIMEOUT,
    )


def wait_for_schedule_time(
    store: Store, namespace: str, seconds: float, timeout: float = 120
) -> datetime:
    """Wait until `seconds` of the schedule have passed on the store's clock; return it.

    Counted from the registration of the entries, so a slow start (a loaded machine)
    shortens nothing: the run always covers the same number of windows.
    """
    deadline = time.monotonic() + timeout
    while True:
        states = store.states(namespace)
        if set(SCHEDULE) <= states.keys():
            origin = max(states[name].defined_at for name in SCHEDULE)
            now = store.clock()
            if now >= origin + timedelta(seconds=seconds):
                return now
        assert time.monotonic() < deadline, f"{seconds} s of schedule did not pass in {timeout} s"
        time.sleep(0.2)


def run_with_a_kill(beats: Cluster, store: Store, namespace: str, seconds: float) -> datetime:
    """Run three replicas, SIGKILL one halfway, and return the store clock at the end.

    The end leaves room for the windows the check needs complete (claim timeout + 2 s).
    """
    beats.start(3)
    try:
        beats.wait_started()
        wait_for_schedule_time(store, namespace, seconds / 2)
        beats.signal(0, signal.SIGKILL)
        return wait_for_schedule_time(store, namespace, seconds + CLAIM_TIMEOUT + 2)
    finally:
        beats.stop()


def each_window_once(
    store: Store, namespace: str, beats: Cluster, headers: list[dict[str, Any]], end: datetime
) -> Verdict:
    """Assert every window up to the end of the run reached the broker once; return the tally.

    Windows after `end - (claim_timeout + 2 s)` may still be waiting for a re-publish.
    """
    verdict = verify(
        store,
        namespace,
        SCHEDULE,
        safebeat_messages(headers),
        complete_until=end - timedelta(seconds=CLAIM_TIMEOUT + 2),
    )
    verdict.assert_exactly_once(beats.logs())
    return verdict


def test_three_replicas_on_postgres_send_each_window_once(
    tmp_path: Path, pg_url: str, redis_url: str, queue: str, namespace: str
) -> None:
    """Three beats on PostgreSQL, one SIGKILLed mid-run: every window once, none missing."""
    store = PostgresStore(pg_url)
    beats = cluster(tmp_path, redis_url, queue, pg_url, namespace)
    end = run_with_a_kill(beats, store, namespace, seconds=12)
    verdict = each_window_once(store, namespace, beats, redis_messages(redis_url, queue), end)
    assert verdict.expected >= 12
    store.close()


def test_beat_stopped_while_a_postgres_statement_waits_exits(
    tmp_path: Path, pg_url: str, redis_url: str, queue: str, namespace: str
) -> None:
    """SIGTERM while a tick's statement waits on a lock: beat exits once the wait ends.

    Celery's SIGTERM handler closes the scheduler from inside the interrupted tick; closing
    used the store's connection, whose lock the tick's statement held: beat hung until
    SIGKILL.
    """
    beats = cluster(tmp_path, redis_url, queue, pg_url, namespace)
    beats.env = {**beats.env, "SAFEBEAT_LOCK_TIMEOUT": "30"}
    beats.start(1)
    store = PostgresStore(pg_url)
    try:
        wait_for_schedule_time(store, namespace, 1.5)
        with psycopg.connect(pg_url) as blocker:
            blocker.execute("LOCK TABLE safebeat_entry, safebeat_dispatch IN ACCESS EXCLUSIVE MODE")
            time.sleep(2.0)  # the next tick (entries every second) now waits on the lock
            beats.processes[0].terminate()
            time.sleep(0.5)
        try:
            beats.processes[0].wait(15)
        except subprocess.TimeoutExpired:
            pytest.fail("beat did not exit within 15 s of its statement ending\n" + beats.logs())
    finally:
        beats.stop()
        store.close()


def test_three_replicas_on_sqlite_send_each_window_once(
    tmp_path: Path, redis_url: str, queue: str, namespace: str
) -> None:
    """Three beats on one SQLite file, one SIGKILLed mid-run: every window once, none missing."""
    url = f"sqlite:///{tmp_path}/safebeat.sqlite3"
    store = SqliteStore(url)
    store.migrate()
    beats = cluster(tmp_path, redis_url, queue, url, namespace)
    end = run_with_a_kill(beats, store, namespace, seconds=12)
    verdict = each_window_once(store, namespace, beats, redis_messages(redis_url, queue), end)
    assert verdict.expected >= 12
    store.close()


def test_three_replicas_on_redis_survive_a_kill_and_a_freeze(
    tmp_path: Path, redis_url: str, queue: str, namespace: str
) -> None:
    """Three beats on Redis: one SIGKILLed, one SIGSTOPped past the lock TTL: each window once."""
    store = RedisStore(redis_url)
    beats = cluster(tmp_path, redis_url, queue, redis_url, namespace)
    beats.start(3)
    try:
        beats.wait_started()
        time.sleep(3)
        beats.signal(0, signal.SIGKILL)
        beats.signal(1, signal.SIGSTOP)
        time.sleep(5)  # past the lock TTL (1 s) and the claim timeout (2 s)
        beats.signal(1, signal.SIGCONT)
        time.sleep(4)
        end = store.clock()
    finally:
        beats.stop()
    verdict = each_window_once(store, namespace, beats, redis_messages(redis_url, queue), end)
    assert verdict.expected >= 12
    store.close()


@pytest.mark.rabbitmq
def test_rabbitmq_broker_changes_nothing(tmp_path: Path, pg_url: str, namespace: str) -> None:
    """The same guarantee with RabbitMQ as the broker: nothing depends on the broker."""
    amqp = services.amqp_url()
    if amqp is None:
        pytest.skip("no RabbitMQ broker runs here (set SAFEBEAT_TEST_AMQP_URL)")
    queue = runscope.unique("acceptance")
    from kombu import Connection, Exchange, Queue

    with Connection(amqp) as conn:
        Queue(queue, routing_key=queue)(conn.default_channel).declare()
    store = PostgresStore(pg_url)
    try:
        beats = cluster(tmp_path, amqp, queue, pg_url, namespace)
        end = run_with_a_kill(beats, store, namespace, seconds=10)
        messages = amqp_messages(amqp, queue)
    finally:
        with Connection(amqp) as conn:  # the queue and its exchange, whatever happened
            channel = conn.default_channel
            Queue(queue, Exchange(queue), routing_key=queue)(channel).delete()
            Exchange(queue)(channel).delete()
    each_window_once(store, namespace, beats, messages, end)
    store.close()


def test_replica_frozen_past_every_timeout_wakes_without_double_sending(
    tmp_path: Path, pg_url: str, redis_url: str, queue: str, namespace: str
) -> None:
    """A beat SIGSTOPped longer than the lock and claim timeouts, then resumed: no duplicate."""
    store = PostgresStore(pg_url)
    beats = cluster(tmp_path, redis_url, queue, pg_url, namespace)
    beats.start(3)
    try:
        beats.wait_started()
        time.sleep(3)
        beats.signal(1, signal.SIGSTOP)
        time.sleep(6)
        beats.signal(1, signal.SIGCONT)
        time.sleep(5)
        end = store.clock()
    finally:
        beats.stop()
    each_window_once(store, namespace, beats, redis_messages(redis_url, queue), end)
    store.close()


def test_beat_embedded_in_workers_sends_each_window_once(
    tmp_path: Path, redis_url: str, queue: str, namespace: str
) -> None:
    """Two `celery worker -B` processes on one host share the SQLite default: each window once."""
    url = f"sqlite:///{tmp_path}/safebeat.sqlite3"
    store = SqliteStore(url)
    store.migrate()
    beats = cluster(tmp_path, redis_url, queue, url, namespace)
    beats.start_worker_beat(2)
    try:
        beats.wait_started()
        # Run until enough windows went out: a worker's start-up is slow on a busy machine.
        broker, deadline = redis.Redis.from_url(redis_url), time.monotonic() + 45
        while broker.llen(queue) < 14 and time.monotonic() < deadline:
            time.sleep(0.5)
        end = store.clock()
    finally:
        beats.stop()
    verdict = each_window_once(store, namespace, beats, redis_messages(redis_url, queue), end)
    assert verdict.expected >= 6
    store.close()


def test_stock_beat_replicas_do_send_duplicates(tmp_path: Path, redis_url: str, queue: str) -> None:
    """The counting can fail: three stock beats send the 1 s entry far more than once a second."""
    beats = Cluster(workdir=tmp_path, broker_url=redis_url, queue=queue, schedule=SCHEDULE)
    beats.start(3, scheduler=None)
    try:
        beats.wait_started()
        started = time.monotonic()
        time.sleep(5)
        elapsed = time.monotonic() - started
    finally:
        beats.stop()
    sent = [m["task"] for m in redis_messages(redis_url, queue)].count("acceptance.every-1s")
    one_beat_at_most = elapsed + 3  # a single beat, with slack for its start and stop
    assert sent > one_beat_at_most, sent
