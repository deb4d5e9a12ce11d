"""Registering a big schedule on Redis while other replicas tick: no script holds Redis long
enough to make another replica's call fail, a registration sent again changes nothing, and
no window is published twice. Each test runs a redis-server of its own with a low busy
threshold (`lua-time-limit`), so a long script shows within milliseconds.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis

from safebeat import Scheduler
from safebeat.errors import StoreError, StoreUnavailable
from safebeat.identity import Replica
from safebeat.stores.protocols import Definition
from safebeat.stores.redis import RedisStore
from safebeat.stores.redis.connection import Timeouts, connect
from safebeat.testing import FakeClock
from tests import services
from tests.acceptance.harness import redis_messages, safebeat_messages
from tests.integration.beat import make_app, tick_until
from tests.integration.test_redis_store import queue
from tests.registering import registered

__all__ = ["queue"]  # the fixture: a broker queue of this test's own

pytestmark = pytest.mark.redis

REPLICA = Replica("host-a", 101, "aaaaaa")
OTHER = Replica("host-b", 202, "bbbbbb")
#: Milliseconds a script may run before Redis answers other clients `BUSY`.
BUSY_THRESHOLD_MS = 250
#: Entries whose registration, as one script, runs several busy thresholds long (about
#: 1 s), while one slice of them runs a small part of one (about 15 ms).
BIG = 50_000


@pytest.fixture
def busy_redis() -> Iterator[services.RedisServer]:
    """A redis-server of this test's own that says `BUSY` after BUSY_THRESHOLD_MS."""
    server = services.start_redis_server(None, "--lua-time-limit", str(BUSY_THRESHOLD_MS))
    yield server
    server.stop()


#: Counts its runs in KEYS[1], then keeps Redis busy for 1 s.
SPIN = """
redis.call('INCR', KEYS[1])
local t = redis.call('TIME')
local start = tonumber(t[1]) + tonumber(t[2]) / 1e6
repeat
    local u = redis.call('TIME')
until tonumber(u[1]) + tonumber(u[2]) / 1e6 - start > 1
return 1
"""


def big_schedule(n: int = BIG) -> list[Definition]:
    return [Definition(f"big-{i}", "every 3600s", f"d{i}") for i in range(n)]


def register_until_done(
    store: RedisStore, namespace: str, defs: Sequence[Definition], *, within: float = 30
) -> bool:
    """Register like a starting replica: after a timeout or a refusal, try again; return
    whether a registration got through within `within` seconds."""
    give_up = time.monotonic() + within
    while time.monotonic() < give_up:
        try:
            store.register(namespace, defs, OTHER)
        except StoreError:
            continue
        return True
    return False


def busy_seen_while(thread: threading.Thread, url: str) -> bool:
    """Ping `url` until Redis answers `BUSY` (True) or `thread` ends (False)."""
    with redis.Redis.from_url(url) as client:
        while thread.is_alive():
            try:
                client.ping()
            except redis.exceptions.ResponseError as exc:
                if str(exc).startswith("BUSY"):
                    return True
                raise
            time.sleep(0.002)
    return False


def wait_until_idle(url: str) -> None:
    """Return once Redis answers a command: no script is running any more."""
    with redis.Redis.from_url(url) as client:
        while True:
            try:
                client.ping()
                return
            except redis.exceptions.ResponseError as exc:
                if not str(exc).startswith("BUSY"):
                    raise


def test_registering_a_big_schedule_never_makes_redis_busy(
    busy_redis: services.RedisServer, namespace: str
) -> None:
    """Registration goes in slices short enough that other clients are never refused
    `BUSY`, and every entry of one registration gets the same anchor."""
    store = RedisStore(busy_redis.url)
    store.migrate()
    registered: list[Any] = []
    thread = threading.Thread(
        target=lambda: registered.append(store.register(namespace, big_schedule(), REPLICA))
    )
    thread.start()
    busy = busy_seen_while(thread, busy_redis.url)
    thread.join(30)
    store.close()
    assert not busy, "a register script ran past Redis's busy threshold"
    [registration] = registered
    assert registration.changed == {}
    states = RedisStore(busy_redis.url).states(namespace)
    assert len(states) == BIG
    assert len({s.anchor for s in states.values()}) == 1
    assert len({s.defined_at for s in states.values()}) == 1


def test_reading_the_states_of_a_big_namespace_never_makes_redis_busy(
    busy_redis: services.RedisServer, namespace: str
) -> None:
    """`states` (safebeat status, the console) reads in slices too: no other client is
    refused `BUSY` while it reads BIG (50,000) entries, and it returns every one of them."""
    store = RedisStore(busy_redis.url)
    states = registered(store, namespace, big_schedule(), REPLICA)
    read: list[Any] = []
    thread = threading.Thread(target=lambda: read.append(store.states(namespace)))
    thread.start()
    busy = busy_seen_while(thread, busy_redis.url)
    thread.join(30)
    store.close()
    assert not busy, "a states script ran past Redis's busy threshold"
    assert read == [states]


def test_a_registration_sent_again_after_a_timeout_changes_nothing(
    busy_redis: services.RedisServer, namespace: str
) -> None:
    """A replica whose client gives up on register (short reply timeout) and sends it again
    leaves every entry's anchor, defined_at and last window as the first call stored them."""
    first = registered(RedisStore(busy_redis.url), namespace, big_schedule(), REPLICA)
    impatient = RedisStore(busy_redis.url, timeouts=Timeouts(reply=0.2))
    for _ in range(3):
        assert register_until_done(impatient, namespace, big_schedule())
    again = RedisStore(busy_redis.url).states(namespace)
    assert again == first


def test_redis_busy_past_the_reply_timeout_is_the_store_unavailable_for_a_while(
    busy_redis: services.RedisServer, namespace: str
) -> None:
    """A step that Redis keeps refusing `BUSY` (another client's long script) until the
    reply timeout is `StoreUnavailable`: beat backs off and tries again, as for an outage."""
    store = RedisStore(busy_redis.url, timeouts=Timeouts(reply=0.1))
    store.register(namespace, big_schedule(10), REPLICA)
    client = connect(busy_redis.url, Timeouts(reply=5))
    spinner = threading.Thread(target=lambda: client.eval(SPIN, 1, "runs"))
    spinner.start()
    assert busy_seen_while(spinner, busy_redis.url)
    with pytest.raises(StoreUnavailable, match="BUSY"):
        store.history(namespace)
    spinner.join(10)
    client.close()
    assert len(store.states(namespace)) == 10
    store.close()


def test_a_script_that_timed_out_is_never_sent_again_by_the_client(
    busy_redis: services.RedisServer,
) -> None:
    """Even with `retry_on_timeout=true` in the URL, redis-py does not re-run a script
    whose reply did not come in time (it may have run: the caller decides)."""
    client = connect(f"{busy_redis.url}?retry_on_timeout=true", Timeouts(reply=0.05))
    script = client.register_script(SPIN)
    script.sha = client.script_load(SPIN)
    with pytest.raises(redis.exceptions.TimeoutError):
        script(keys=["runs"])
    wait_until_idle(busy_redis.url)
    client.close()
    with redis.Redis.from_url(busy_redis.url) as check:
        assert check.get("runs") == b"1"


def test_a_replica_registering_a_big_schedule_makes_no_other_replica_publish_twice(
    busy_redis: services.RedisServer, redis_url: str, queue: str, namespace: str
) -> None:
    """Replica B publishes a window; just before it records the publish, replica A starts
    and registers BIG (50,000) entries with a short socket timeout (retrying, like beat does).
    B's record must not be refused: every window reaches the broker exactly once, also
    after the claim timeout, when unrecorded claims would be published again."""
    schedule = {f"big-{i}": {"task": "faults.big", "schedule": 3600.0} for i in range(BIG)}
    app = make_app(
        redis_url,
        queue,
        busy_redis.url,
        namespace,
        beat_schedule={"every-1s": {"task": "faults.tick", "schedule": 1.0}, **schedule},
    )
    clock = FakeClock()
    replica_b = Scheduler(app, monotonic=clock.monotonic)
    # Shorter than one big script, longer than a slice of one.
    starting = RedisStore(busy_redis.url, timeouts=Timeouts(reply=0.2))
    store = replica_b.store
    record_publish = store.record_publish
    disturbed: list[datetime] = []
    busy: list[bool] = []
    registered: list[bool] = []
    a_starts = threading.Thread(
        target=lambda: registered.append(
            register_until_done(
                starting,
                namespace,
                [e.definition for e in replica_b.entries.values()],
                within=10,
            )
        )
    )

    def record_while_a_registers(namespace: str, sent: Any, failed: Any) -> None:
        if sent and not disturbed:
            disturbed.append(datetime.now(timezone.utc))
            a_starts.start()
            busy.append(busy_seen_while(a_starts, busy_redis.url))
        record_publish(namespace, sent, failed)

    store.record_publish = record_while_a_registers  # type: ignore[method-assign]
    claim_timeout = timedelta(seconds=2)  # make_app's
    settled = 2 * claim_timeout + timedelta(seconds=1)  # any unrecorded claim republished

    def b_ticked_on_past_the_claim_timeout() -> bool:
        if not disturbed or a_starts.is_alive():
            return False
        sent = safebeat_messages(redis_messages(redis_url, queue))
        return any(m.window > disturbed[0] + settled for m in sent)

    try:
        tick_until(replica_b, clock, b_ticked_on_past_the_claim_timeout)
    finally:
        replica_b.close()
        a_starts.join(30)
        starting.close()
    windows = [m.window for m in safebeat_messages(redis_messages(redis_url, queue))]
    assert windows, "replica B published nothing"
    twice = {w: n for w, n in Counter(windows).items() if n > 1}
    assert not twice, f"windows published more than once: {twice}"
    assert busy == [False], "a register script ran past Redis's busy threshold"
    assert registered == [True], "replica A's registration never got through"
    assert replica_b.metrics.totals.store_errors == 0
