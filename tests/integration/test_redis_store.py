"""The Redis store against real redis-servers this test owns: restarts, flushes, bad
credentials, eviction policies, the documented ACL user, TLS and Unix sockets, and the
number of round trips a tick costs.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis

from safebeat import Scheduler
from safebeat.errors import StoreError, TickTooLong
from safebeat.identity import Replica, task_id_for
from safebeat.stores.protocols import (
    Definition,
    EntryState,
    LeasedRun,
    NewClaim,
    NewSkip,
    Outcome,
    Reclaim,
    RunEnd,
    Start,
    Store,
    TickPlan,
)
from safebeat.stores.redis import RedisStore, key_prefix
from safebeat.testing import FakeClock
from tests import runscope, services
from tests.acceptance.harness import redis_messages, safebeat_messages
from tests.integration.beat import make_app, tick_until
from tests.registering import registered

pytestmark = pytest.mark.redis

REPLICA = Replica("host-a", 101, "aaaaaa")
OTHER = Replica("host-b", 202, "bbbbbb")
DOCS = Path(__file__).parents[2] / "docs" / "redis.md"


@pytest.fixture
def own_redis() -> Iterator[services.RedisServer]:
    """A redis-server of this test's own, which it may stop, flush or reconfigure."""
    server = services.start_redis_server()
    yield server
    server.stop()


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = runscope.unique("redis-store")
    yield name
    redis.Redis.from_url(redis_url).delete(name)


def claim_plan(namespace: str, entry: str, *windows: datetime) -> TickPlan:
    claims = [NewClaim(entry, w, task_id_for(namespace, entry, w), "tasks.run") for w in windows]
    return TickPlan(claims=claims, advances={entry: max(windows)})


def windows_on(broker_url: str, queue: str) -> list[datetime]:
    """The window of every message on the broker's queue (left in place)."""
    return [m.window for m in safebeat_messages(redis_messages(broker_url, queue))]


def assert_once_each(broker_url: str, queue: str) -> list[datetime]:
    """Every window on the broker appears once; return them in order."""
    windows = windows_on(broker_url, queue)
    repeated = {w: n for w, n in Counter(windows).items() if n > 1}
    assert not repeated, f"windows sent more than once: {repeated}"
    return sorted(windows)


def test_restart_without_persistence_keeps_beat_running_and_sends_no_window_twice(
    redis_url: str, queue: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis stopped, then back empty: beat reports it, re-registers, resumes, no duplicate."""
    server = services.start_redis_server()
    clock = FakeClock()
    app = make_app(redis_url, queue, server.url, namespace)
    scheduler = Scheduler(app, monotonic=clock.monotonic)
    totals = scheduler.metrics.totals
    try:
        with caplog.at_level(logging.INFO):
            tick_until(scheduler, clock, lambda: totals.dispatched >= 1)
            server.stop()
            tick_until(scheduler, clock, lambda: totals.store_errors >= 1)
            server = services.start_redis_server(server.port)
            restarted = datetime.now(timezone.utc)
            # Through the store backoff: until a window after the restart is sent.
            tick_until(
                scheduler, clock, lambda: any(w > restarted for w in windows_on(redis_url, queue))
            )
    finally:
        scheduler.close()
        server.stop()
    windows = assert_once_each(redis_url, queue)
    assert scheduler.metrics.totals.store_errors >= 1
    assert "store unreachable" in caplog.text
    assert "holds no entries of namespace" in caplog.text
    assert any(w < restarted for w in windows), "nothing was sent before the restart"
    assert any(w > restarted for w in windows), "dispatch did not resume after the restart"


def test_flush_mid_run_re_registers_and_sends_no_window_twice(
    redis_url: str, queue: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """FLUSHALL while beat runs: it says the keys are gone, starts over, and repeats nothing."""
    server = services.start_redis_server()
    clock = FakeClock()
    app = make_app(redis_url, queue, server.url, namespace)
    scheduler = Scheduler(app, monotonic=clock.monotonic)
    store = redis.Redis.from_url(server.url)
    try:
        with caplog.at_level(logging.WARNING):
            tick_until(scheduler, clock, lambda: scheduler.metrics.totals.dispatched >= 1)
            store.flushall()
            flushed = datetime.now(timezone.utc)
            tick_until(
                scheduler, clock, lambda: any(w > flushed for w in windows_on(redis_url, queue))
            )
    finally:
        scheduler.close()
        store.close()
        server.stop()
    windows = assert_once_each(redis_url, queue)
    assert "flushed or evicted" in caplog.text
    assert any(w > flushed for w in windows), "dispatch did not resume after the flush"
    assert scheduler.metrics.totals.store_errors == 0


def test_windows_this_replica_claimed_stay_claimed_when_redis_forgets_them(
    own_redis: services.RedisServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """After Redis loses a claim (restart from an older snapshot), its replica won't claim it again.

    Its tick still advances the entry's last window past it, so from then on the fence
    keeps every other replica from claiming it too. A replica that ticks first, before
    the one that claimed it, could: that is what `appendfsync always` in docs/redis.md is
    for.
    """
    store, other = RedisStore(own_redis.url), RedisStore(own_redis.url)
    state = registered(store, namespace, [Definition("a", "every 1s", "d1")], REPLICA)["a"]
    window = state.anchor + timedelta(seconds=1)
    plan = claim_plan(namespace, "a", window)
    first = store.tick(namespace, ["a"], lambda now, s: plan, replica=REPLICA)
    assert first is not None
    assert [c.window for c in first.claimed] == [window]

    raw = redis.Redis.from_url(own_redis.url)
    prefix = key_prefix(namespace)
    raw.delete(*raw.keys(f"{prefix}:claim:*"), *raw.keys(f"{prefix}:row:*"))
    raw.hdel(f"{prefix}:last", "a")
    raw.close()

    with caplog.at_level(logging.WARNING):
        again = store.tick(namespace, ["a"], lambda now, s: plan, replica=REPLICA)
    assert again is not None
    assert again.claimed == []
    assert "no longer knows 1 window(s) this replica already claimed" in caplog.text
    elsewhere = other.tick(namespace, ["a"], lambda now, s: plan, replica=OTHER)
    assert elsewhere is not None
    assert elsewhere.claimed == []
    store.close()
    other.close()


def test_what_a_replica_remembers_claiming_is_kept_per_namespace(
    own_redis: services.RedisServer, namespace: str
) -> None:
    """A later window claimed for entry "a" in one namespace does not hold back an earlier
    one of the entry of the same name in another."""
    store, second = RedisStore(own_redis.url), f"{namespace}-second"
    late = registered(store, namespace, [Definition("a", "every 1s", "d1")], REPLICA)["a"]
    late_window = late.anchor + timedelta(seconds=30)
    early = registered(store, second, [Definition("a", "every 1s", "d1")], REPLICA)["a"]
    early_window = early.anchor + timedelta(seconds=1)
    assert early_window < late_window
    plan = claim_plan(namespace, "a", late_window)
    first = store.tick(namespace, ["a"], lambda now, s: plan, replica=REPLICA)
    assert first is not None
    assert [c.window for c in first.claimed] == [late_window]
    plan = claim_plan(second, "a", early_window)
    other = store.tick(second, ["a"], lambda now, s: plan, replica=REPLICA)
    assert other is not None
    assert [c.window for c in other.claimed] == [early_window]
    store.close()


@pytest.mark.parametrize(
    ("url_of", "expected"),
    [
        (lambda port: f"redis://:wrong-pw@127.0.0.1:{port}/0", "check the user name and password"),
        (
            lambda port: f"redis://beat:wrong-pw@127.0.0.1:{port}/0",
            "check the user name and password",
        ),
        (lambda port: f"redis://:wrong-pw@127.0.0.1:{services.free_port()}/0", "unreachable"),
        (lambda port: "redis://:wrong-pw@127.0.0.1:notaport/0", "Port could not be cast"),
    ],
    ids=["wrong-password", "wrong-acl-user", "unreachable", "bad-url"],
)
def test_bad_credentials_or_url_are_reported_clearly_and_beat_keeps_retrying(
    url_of: object, expected: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Wrong password, unknown server or bad URL: one clear log line, no password, no crash."""
    server = services.start_redis_server(None, "--requirepass", "right-pw")
    url = url_of(server.port)  # type: ignore[operator]
    scheduler = Scheduler(make_app("memory://", "q", url, "bad-input"))
    try:
        with caplog.at_level(logging.DEBUG):
            for _ in range(2):
                scheduler.engine.guard.backoff.until = 0.0
                delay = scheduler.tick()
                assert delay > 0
    finally:
        scheduler.close()
        server.stop()
    assert expected in caplog.text
    assert "wrong-pw" not in caplog.text
    assert ":***@127.0.0.1" in caplog.text
    assert scheduler.metrics.totals.store_errors == 3  # at startup, then each tick
    assert scheduler.metrics.totals.claimed == 0


def test_an_eviction_policy_that_can_drop_claims_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """allkeys-* eviction is warned about by default, refused on request, ignored on request."""
    server = services.start_redis_server(
        None, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"
    )
    try:
        with caplog.at_level(logging.WARNING):
            RedisStore(server.url).migrate()
        assert "maxmemory-policy is allkeys-lru" in caplog.text
        assert "noeviction" in caplog.text

        caplog.clear()
        with pytest.raises(StoreError, match=r"allkeys-lru.*safebeat_redis_eviction='refuse'"):
            RedisStore(server.url, eviction="refuse").migrate()

        with caplog.at_level(logging.WARNING):
            RedisStore(server.url, eviction="ignore").migrate()
        assert "maxmemory-policy" not in caplog.text
    finally:
        server.stop()


def test_volatile_eviction_is_safe_because_only_the_lock_has_a_ttl(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """volatile-lru evicts only keys with a TTL; safebeat's claims have none, so no warning."""
    server = services.start_redis_server(
        None, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"
    )
    try:
        store = RedisStore(server.url, eviction="refuse")
        with caplog.at_level(logging.WARNING):
            state = registered(store, "ns", [Definition("a", "every 1s", "d1")], REPLICA)["a"]
            store.tick(
                "ns",
                ["a"],
                lambda now, s: claim_plan("ns", "a", state.anchor + timedelta(seconds=1)),
                replica=REPLICA,
            )
        raw = redis.Redis.from_url(server.url)
        with_ttl = [k for k in raw.keys("safebeat:*") if raw.pttl(k) >= 0]
        raw.close()
        store.close()
    finally:
        server.stop()
    assert "maxmemory-policy" not in caplog.text
    assert with_ttl == []


def documented_acl_rule() -> str:
    """The `ACL SETUSER` line that docs/redis.md tells users to run."""
    match = re.search(r"^ACL SETUSER safebeat .+$", DOCS.read_text(encoding="utf-8"), re.M)
    assert match, "docs/redis.md shows no ACL SETUSER line for the safebeat user"
    return match.group(0)


def exercise(store: Store, namespace: str) -> None:
    """Use every part of the store protocol once, with claims, a reclaim and a prune."""
    assert store.migrate() >= 1
    store.clock()
    state = registered(store, namespace, [Definition("a", "every 1s", "d1")], REPLICA)["a"]
    plan = claim_plan(namespace, "a", state.anchor + timedelta(seconds=1))
    result = store.tick(namespace, ["a"], lambda now, s: plan, replica=REPLICA)
    assert result is not None
    assert len(result.claimed) == 1
    store.tick(
        namespace,
        ["a"],
        lambda now, s: TickPlan(),
        replica=REPLICA,
        reclaim=Reclaim(["a"], timedelta(0)),
    )
    store.record_publish(namespace, [result.claimed[0].id], {})
    window = result.claimed[0].window
    run = LeasedRun("a", window, "w@h:1", 0)
    assert store.start_execution(namespace, run, lease=timedelta(hours=1)) is Start.RUN
    store.finish_execution(namespace, run, RunEnd(Outcome.SUCCESS, timedelta(seconds=1)))
    assert store.claim_effect(
        namespace, "charge:42", owner="o1", keep_for=timedelta(days=1), task_id=None
    )
    assert store.release_effect(namespace, "charge:42", owner="o1")
    store.heartbeat(namespace, REPLICA, "1", {"a": "d1"})
    assert store.replicas(namespace)
    assert store.history(namespace, "a")
    assert store.states(namespace)
    assert namespace in store.namespaces()
    store.forget_replica(namespace, REPLICA)
    store.prune(namespace, store.clock() + timedelta(days=1))


def test_the_documented_acl_user_can_do_everything_beat_needs(namespace: str) -> None:
    """A Redis user with exactly the commands docs/redis.md lists runs every store operation."""
    server = services.start_redis_server()
    admin = redis.Redis(port=server.port)
    url = f"redis://safebeat:beat-pw@127.0.0.1:{server.port}/0"
    try:
        admin.execute_command(*documented_acl_rule().replace("<password>", "beat-pw").split())
        store = RedisStore(url)
        exercise(store, namespace)
        store.close()

        admin.execute_command("ACL", "SETUSER", "safebeat", "-zadd")
        store = RedisStore(url)
        state = registered(store, namespace, [Definition("b", "every 1s", "d1")], REPLICA)
        window = state["b"].anchor + timedelta(seconds=1)
        with pytest.raises(StoreError, match="ACL user lacks a command"):
            store.tick(
                namespace,
                ["b"],
                lambda now, s: claim_plan(namespace, "b", window),
                replica=REPLICA,
            )
        store.close()
    finally:
        admin.close()
        server.stop()


def test_the_documented_acl_user_works_on_redis_cluster(
    redis_cluster_url: str, namespace: str
) -> None:
    """On Redis Cluster the documented line plus the two discovery commands is enough."""
    rule = documented_acl_rule().replace("<password>", "beat-pw").split()
    nodes = redis_cluster_url.removeprefix("redis+cluster://").split(",")
    for node in nodes:
        admin = redis.Redis(port=int(node.rsplit(":", 1)[1]))
        admin.execute_command(*rule, "+cluster|slots", "+command")
        admin.close()
    store = RedisStore(redis_cluster_url.replace("://", "://safebeat:beat-pw@", 1))
    exercise(store, namespace)
    store.close()


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[services.RedisServer, Path]]:
    """A redis-server speaking only TLS, with a self-signed certificate for 127.0.0.1."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    port = services.free_port()
    try:
        server = services.start_redis_server(
            port,
            "--port", "0", "--tls-port", str(port), "--tls-cert-file", str(cert),
            "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert),
            "--tls-auth-clients", "no",
        )  # fmt: skip
    except RuntimeError:
        pytest.skip("this redis-server was built without TLS")
    yield server, cert
    server.stop()


def test_tls_with_a_verified_certificate(
    tls_server: tuple[services.RedisServer, Path], namespace: str
) -> None:
    """`rediss://` with the server's CA verifies the certificate and runs the whole protocol."""
    server, cert = tls_server
    store = RedisStore(f"rediss://127.0.0.1:{server.port}/0?ssl_ca_certs={cert}")
    exercise(store, namespace)
    store.close()
    untrusted = RedisStore(f"rediss://127.0.0.1:{server.port}/0")
    with pytest.raises(StoreError, match="certificate verify failed"):
        untrusted.clock()


def test_unix_socket(tmp_path: Path, namespace: str) -> None:
    """`unix:///path/redis.sock?db=2` reaches the server through its socket file."""
    socket_path = tmp_path / "redis.sock"
    server = services.start_redis_server(
        None, "--unixsocket", str(socket_path), "--unixsocketperm", "700"
    )
    try:
        store = RedisStore(f"unix://{socket_path}?db=2")
        exercise(store, namespace)
        store.close()
        keys = redis.Redis(unix_socket_path=str(socket_path), db=2).keys("safebeat:*")
    finally:
        server.stop()
    assert keys, "nothing was written to database 2"


def script_calls(client: redis.Redis) -> int:
    """How many scripts clients ran: every round trip of a tick is one EVALSHA (or EVAL)."""
    stats = client.info("commandstats")
    return sum(
        int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval")
    )


@pytest.mark.parametrize("due", [1, 2000])
def test_a_tick_is_two_round_trips_however_many_windows_it_claims(
    own_redis: services.RedisServer, namespace: str, due: int
) -> None:
    """Claiming 1 or 2,000 windows costs the same two scripts: lock+load, then claim+commit."""
    store = RedisStore(own_redis.url)
    names = [f"e{i}" for i in range(due)]
    states = registered(store, namespace, [Definition(n, "every 1s", "d1") for n in names], REPLICA)
    window = next(iter(states.values())).anchor + timedelta(seconds=1)
    plan = TickPlan(
        claims=[NewClaim(n, window, task_id_for(namespace, n, window), "t") for n in names],
        advances=dict.fromkeys(names, window),
    )
    client = redis.Redis.from_url(own_redis.url)
    # A first tick loads the scripts into Redis (EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA):
    # a cost once per server start, not per tick.
    store.tick(namespace, [], lambda now, s: TickPlan(), replica=REPLICA)
    client.config_resetstat()
    before = script_calls(client)
    result = store.tick(namespace, names, lambda now, s: plan, replica=REPLICA)
    calls = script_calls(client) - before
    client.close()
    store.close()
    assert result is not None
    assert len(result.claimed) == due
    assert calls == 2


def test_frozen_lock_holder_loses_the_lock_after_its_ttl_and_wakes_to_claim_nothing(
    redis_url: str, namespace: str
) -> None:
    """A replica frozen inside its tick stalls the others for one lock TTL; it writes nothing.

    Redis cannot end the frozen replica's tick as PostgreSQL ends its transaction, so the
    frozen one sends its writes when it wakes: `finish_tick` finds the lock no longer its
    own, writes nothing, and the tick raises TickTooLong (beat then claims fewer entries).
    """
    frozen = RedisStore(redis_url, lock_timeout=timedelta(seconds=1))
    alive = RedisStore(redis_url, lock_timeout=timedelta(seconds=1))
    state = registered(frozen, namespace, [Definition("a", "every 1s", "d")], REPLICA)["a"]
    window = state.anchor + timedelta(seconds=1)
    inside, wake = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def freezing_planner(now: datetime, states: Mapping[str, EntryState]) -> TickPlan:
        inside.set()
        wake.wait(20)  # the process is stopped here, holding the tick lock
        return claim_plan(namespace, "a", window)

    def frozen_replica() -> None:
        try:
            outcome["result"] = frozen.tick(namespace, ["a"], freezing_planner, replica=REPLICA)
        except TickTooLong as exc:
            outcome["result"] = exc

    thread = threading.Thread(target=frozen_replica)
    thread.start()
    assert inside.wait(10)
    started, busy = time.monotonic(), 0
    # The stall is bounded by the lock's TTL, read from Redis rather than timed here.
    with redis.Redis.from_url(redis_url) as client:
        lock_ttl = client.pttl(f"{key_prefix(namespace)}:lock")
    while (
        result := alive.tick(
            namespace, ["a"], lambda n, s: claim_plan(namespace, "a", window), replica=OTHER
        )
    ) is None:
        busy += 1
        assert time.monotonic() - started < 10, "the frozen replica held the lock too long"
        time.sleep(0.05)
    stalled = time.monotonic() - started
    wake.set()
    thread.join(20)
    assert busy > 0
    assert 0 < lock_ttl <= 1000  # one lock timeout at most
    assert stalled >= lock_ttl / 1000 - 0.01  # no sooner than the TTL ran out
    assert [c.window for c in result.claimed] == [window]
    assert isinstance(outcome["result"], TickTooLong)
    assert "expired while this replica planned" in str(outcome["result"])
    [row] = alive.history(namespace, "a")
    assert row.replica == OTHER.id
    frozen.close()
    alive.close()


def test_states_registered_at_one_instant_share_their_instants_and_schedule_text(
    own_redis: services.RedisServer, namespace: str
) -> None:
    """One anchor, one definition time and one schedule text for every state of entries
    registered together, not a copy per entry (about 150 bytes of every state)."""
    store = RedisStore(own_redis.url)
    definitions = [Definition(f"e{i}", "every 1h", f"d{i}") for i in range(3)]
    states = list(registered(store, namespace, definitions, REPLICA).values())
    store.close()
    assert len(states) == 3
    assert len({id(s.anchor) for s in states}) == 1
    assert len({id(s.defined_at) for s in states}) == 1
    assert len({id(s.schedule) for s in states}) == 1


def test_dead_runs_and_unsent_claims_of_an_earlier_release_are_still_taken_over(
    redis_url: str, namespace: str
) -> None:
    """A store an earlier release wrote (dead runs only in P:running:<entry>, no P:leases)
    keeps working: the first registration moves their leases to P:leases, so the take-over
    pass finds both the dead run and the unsent claim left before the upgrade."""
    store = RedisStore(redis_url)
    store.migrate()
    states = registered(
        namespace=namespace,
        store=store,
        definitions=[Definition(n, "every 1s", "d1") for n in "ab"],
        replica=REPLICA,
    )
    windows = {n: states[n].anchor + timedelta(seconds=1) for n in "ab"}
    claims = {}
    for name, window in windows.items():
        result = store.tick(
            namespace,
            [name],
            lambda now, s, n=name, w=window: claim_plan(namespace, n, w),
            replica=REPLICA,
        )
        assert result is not None
        [claims[name]] = result.claimed
    store.record_publish(namespace, [claims["a"].id], {})  # "b" stays unsent
    dead = LeasedRun("a", windows["a"], "w@h:1", 0)
    assert store.start_execution(namespace, dead, lease=timedelta(0)) is Start.RUN
    prefix = key_prefix(namespace)
    admin = redis.Redis.from_url(redis_url)
    admin.delete(f"{prefix}:leases", f"{prefix}:leases:migrated")  # the earlier layout

    upgraded = RedisStore(redis_url)
    upgraded.register(namespace, [Definition(n, "every 1s", "d1") for n in "ab"], OTHER)
    result = upgraded.tick(
        namespace,
        [],
        lambda now, s: TickPlan(),
        replica=OTHER,
        reclaim=Reclaim({"a", "b"}, timedelta(0)),
    )
    assert result is not None
    assert sorted((c.entry, c.window, c.attempts) for c in result.reclaimed) == [
        ("a", windows["a"], 2),
        ("b", windows["b"], 2),
    ]
    for each in (store, upgraded):
        each.close()


def test_queued_claims_of_an_earlier_release_are_still_seen(redis_url: str, namespace: str) -> None:
    """A store an earlier release wrote (claims only in P:history:<entry>, no
    P:dispatched:<entry>) keeps its queued claims visible: the first registration of the
    upgraded store adds them, skipped rows after them or not."""
    store = RedisStore(redis_url)
    store.migrate()
    state = registered(store, namespace, [Definition("a", "every 1s", "d1")], REPLICA)["a"]
    window = state.anchor + timedelta(seconds=1)
    skip = NewSkip("a", window + timedelta(seconds=1), window + timedelta(seconds=1), 1, "paused")
    store.tick(namespace, ["a"], lambda now, s: claim_plan(namespace, "a", window), replica=REPLICA)
    store.tick(namespace, ["a"], lambda now, s: TickPlan(skips=[skip]), replica=REPLICA)
    [claimed_at] = [r.claimed_at for r in store.history(namespace, "a") if r.window == window]
    prefix = key_prefix(namespace)
    admin = redis.Redis.from_url(redis_url)
    admin.delete(f"{prefix}:dispatched:a", f"{prefix}:dispatched:migrated")  # earlier layout

    upgraded = RedisStore(redis_url)
    upgraded.register(namespace, [Definition("a", "every 1s", "d1")], OTHER)
    result = upgraded.tick(namespace, ["a"], lambda now, s: TickPlan(), replica=OTHER)
    assert result is not None
    assert result.states["a"].queued_since == claimed_at
    for each in (store, upgraded):
        each.close()
