"""The ten chaos scenarios: what each one does to the replicas, the store or the broker.

Every fault hits every side of the run at the same moment (stock beat included, where the
fault exists for it: stock beat has no store). Process faults are timed a few milliseconds
after a whole second, when the replicas are in the middle of a tick: claiming, publishing
or recording. Durations are those of the short mode; `Mode.scale` stretches them.
"""

from __future__ import annotations

import signal
import time
from datetime import timedelta

import psycopg
import redis

from safebeat.stores.redis.base import key_prefix
from tests.chaos.counting import utc
from tests.chaos.crontabs import slots_of
from tests.chaos.lab import faketime_library, skewed_clock_env
from tests.chaos.runner import POSTGRES, REDIS, SQLITE, Run, Scenario, Side

ALL_STORES = (POSTGRES, REDIS, SQLITE)
SHARED_STORES = (POSTGRES, REDIS)  # a store on the network: it can restart, be cut off
CLOCK_SKEWS = (+120, -120, 0)


def _recover(run: Run, limit: float = 40.0) -> None:
    """No more faults: wait until every entry is dispatched again (at most `limit` s), then
    long enough for the last stale claim to be re-published before the run stops."""
    run.wait_resumed(limit)
    run.sleep(run.mode.settle + 1.0)


def kill_and_restart(run: Run) -> None:
    """SIGKILL a random replica every few seconds and start a new one in its place."""
    for _ in range(max(3, round(3 * run.mode.scale))):
        run.at_window_boundary()
        slot = run.rng.randrange(run.replicas)
        for side in run.sides:
            process = side.current(slot).processes[0]
            process.send_signal(signal.SIGKILL)
            process.wait(10)
            side.start(slot)
        run.fault(f"SIGKILL replica {slot} of every side, a new one started in its place")
        run.sleep(1.0)
    run.fault_over("last kill")
    _recover(run)


def freeze_past_every_timeout(run: Run) -> None:
    """SIGSTOP the replica that published last, past the lock TTL and claim timeout; SIGCONT.

    The replica that sent the newest window is the likeliest to hold the tick lock or
    unsent claims at the next window, a few milliseconds later.
    """
    freeze = 2 * run.mode.claim_timeout + 1  # > lock timeout, > claim timeout (and its half)
    for _ in range(max(1, round(run.mode.scale))):
        run.at_window_boundary(0.002, 0.015)
        frozen = {side.kind: run.last_sender(side) for side in run.sides}
        for side in run.sides:
            side.signal(frozen[side.kind], signal.SIGSTOP)
        run.fault(f"SIGSTOP the last sender of every side {frozen} for {freeze:g}s")
        run.sleep(freeze)
        for side in run.sides:
            side.signal(frozen[side.kind], signal.SIGCONT)
        run.fault_over("SIGCONT")
        run.sleep(1.0)
    _recover(run)


def restart_the_store(run: Run) -> None:
    """Crash the store server (PostgreSQL `-m immediate`, Redis SIGKILL) and start it again."""
    outage = run.mode.store_outage
    for _ in range(max(1, round(run.mode.scale / 3))):
        run.at_window_boundary()
        if run.postgres is not None and run.safebeat_sides(POSTGRES):
            run.postgres.crash()
        if run.redis_store is not None:
            run.redis_store.crash()
        run.fault(f"store servers crashed, down for {outage:g}s")
        run.sleep(outage)
        if run.postgres is not None and run.safebeat_sides(POSTGRES):
            run.postgres.start()
        if run.redis_store is not None:
            run.redis_store.start()
        run.fault_over("store servers started again")
        run.wait_resumed(40)  # the next crash hits a cluster that has recovered
        run.sleep(1.0)
    _recover(run)


def _proxy_replica_zero(run: Run, side: Side, slot: int) -> None:
    if slot == 0 and side.kind in SHARED_STORES and side.proxy is None:
        side.slot_env[0] = {"SAFEBEAT_URL": run.proxied(side)}


def cut_one_replica_off(run: Run) -> None:
    """Cut the TCP connection between replica 0 and the store, then restore it."""
    outage = run.mode.store_outage + 1
    for _ in range(max(1, round(run.mode.scale / 3))):
        run.at_window_boundary()
        for side in run.sides:
            if side.proxy is not None:
                side.proxy.cut()
        run.fault(f"replica 0 cut off from its store for {outage:g}s")
        run.sleep(outage)
        for side in run.sides:
            if side.proxy is not None:
                side.proxy.restore()
        run.fault_over("replica 0 reconnected")
        run.wait_resumed(40)
        run.sleep(1.0)
    _recover(run)


def broker_down(run: Run) -> None:
    """Crash the broker (SIGKILL; its append-only file keeps what it took) and restart it."""
    outage = run.mode.broker_outage
    assert run.broker is not None
    run.at_window_boundary()
    run.broker.crash()
    run.fault(f"broker crashed, down for {outage:g}s")
    run.sleep(outage)
    run.broker.start()
    run.fault_over("broker started again")
    # A replica that kept failing to publish pauses claiming with backoff (up to 30 s).
    _recover(run, limit=60)


#: Long enough that one take-over (the claim timeout, then up to one periodic pass of half
#: of it: 7.5 s) and two (10 s and more) are told apart by the windows' lag.
BROKER_CUT_CLAIM_TIMEOUT = 5.0


def _proxy_replica_zero_broker(run: Run, side: Side, slot: int) -> None:
    if slot == 0 and side.proxy is None:
        side.slot_env[0] = {"SB_BROKER_URL": run.proxied_broker(side)}


def cut_one_replica_from_the_broker(run: Run) -> None:
    """Cut the TCP connection between replica 0 and the broker (it still reaches its store),
    then restore it: the others must not wait for the windows it cannot send."""
    outage = run.mode.broker_outage
    run.at_window_boundary()
    for side in run.sides:
        if side.proxy is not None:
            side.proxy.cut()
    run.fault(f"replica 0 cut off from the broker for {outage:g}s")
    run.sleep(outage)
    for side in run.sides:
        if side.proxy is not None:
            side.proxy.restore()
    run.fault_over("replica 0 reaches the broker again")
    _recover(run, limit=60)


def _skew_clock(run: Run, side: Side, slot: int) -> None:
    offset = CLOCK_SKEWS[slot % len(CLOCK_SKEWS)]
    if offset:
        side.slot_env[slot] = skewed_clock_env(offset)


def skewed_clocks(run: Run) -> None:
    """Run with replica clocks at +120 s, -120 s and right (libfaketime), from their start."""
    run.fault("replica clocks skewed by +120 s / -120 s / 0 since they started")
    run.sleep(6.0 * run.mode.scale)
    run.sleep(run.mode.settle)


def _move_state_back(url: str, namespace: str, by: timedelta) -> None:
    """Move everything the PostgreSQL store knows of `namespace` `by` into the past: each
    entry's anchor, definition time and decided-until, each dispatch row's window and
    times. To the store, the replicas were stopped `by` longer than they were."""
    with psycopg.connect(url) as connection:
        connection.execute(
            "UPDATE safebeat_entry SET anchor = anchor - %(by)s, defined_at = defined_at - %(by)s,"
            " last_window = last_window - %(by)s WHERE namespace = %(namespace)s",
            {"by": by, "namespace": namespace},
        )
        connection.execute(
            "UPDATE safebeat_dispatch SET window_at = window_at - %(by)s,"
            " skipped_from = skipped_from - %(by)s, claimed_at = claimed_at - %(by)s,"
            " sent_at = sent_at - %(by)s WHERE namespace = %(namespace)s",
            {"by": by, "namespace": namespace},
        )


#: The same for the Redis store, on the key layout `safebeat/stores/redis/scripts.lua`
#: describes: the state hashes, each dispatch row's instants, the claim marker named by its
#: window, and the sorted sets scored by window or claim time. KEYS[1]: the prefix's
#: `:history` set. ARGV: the prefix, the shift in microseconds.
_REDIS_MOVE_BACK = """
local p, by = ARGV[1], tonumber(ARGV[2])
local function back(value) return string.format('%d', tonumber(value) - by) end
for _, name in ipairs({'anchor', 'defined', 'last'}) do
    local flat = redis.call('HGETALL', p .. ':' .. name)
    for i = 1, #flat, 2 do redis.call('HSET', p .. ':' .. name, flat[i], back(flat[i + 1])) end
end
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local row = p .. ':row:' .. id
    local entry, window = unpack(redis.call('HMGET', row, 'entry', 'window'))
    for _, field in ipairs({'window', 'skipped_from', 'claimed_at', 'sent_at'}) do
        local value = redis.call('HGET', row, field)
        if value then redis.call('HSET', row, field, back(value)) end
    end
    local marker = p .. ':claim:' .. window .. ':' .. entry
    if redis.call('EXISTS', marker) == 1 then
        redis.call('RENAME', marker, p .. ':claim:' .. back(window) .. ':' .. entry)
    end
    redis.call('ZADD', p .. ':history', back(window), id)
    redis.call('ZADD', p .. ':history:' .. entry, back(window), id)
    for _, set in ipairs({':age', ':unsent'}) do
        local score = redis.call('ZSCORE', p .. set, id)
        if score then redis.call('ZADD', p .. set, back(score), id) end
    end
end
"""


def _move_redis_state_back(url: str, namespace: str, by: timedelta) -> None:
    """`_move_state_back` for the Redis store: one script, so no replica sees half of it."""
    prefix = key_prefix(namespace)
    client = redis.Redis.from_url(url)
    try:
        client.eval(
            _REDIS_MOVE_BACK, 1, f"{prefix}:history", prefix, by // timedelta(microseconds=1)
        )
    finally:
        client.close()


def _wait_caught_up(run: Run, limit: float, quiet: float = 2.0) -> None:
    """Wait (at most `limit` s) until every crontab entry has sent a message since the
    restart and no window older than the restart has come for `quiet` s."""
    assert run.collector is not None
    assert run.fault_over_at is not None
    restart, deadline = run.fault_over_at, time.time() + limit
    while time.time() < deadline:
        for side in run.safebeat_sides():
            after = [a for a in run.collector.arrivals(side.queue) if a.at > restart]
            late = [a.at for a in after if a.window and a.window.timestamp() <= restart]
            if not set(run.crontabs) <= {a.entry for a in after}:
                break
            if late and max(late) > time.time() - quiet:
                break
        else:
            run.event("every crontab entry caught up")
            return
        time.sleep(0.5)
    run.event(f"the catch-up did not end within {limit:g}s")


def _wait_minute_sent(run: Run, limit: float) -> None:
    """If a minute turned since the restart, wait (at most `limit` s) until every crontab
    entry with a slot at it has sent that window: a burst of thousands can take longer than
    the settle time on a loaded machine, and a window claimed but not yet sent when the
    run stops would count as missing."""
    assert run.collector is not None
    assert run.fault_over_at is not None
    minute = utc(time.time() // 60 * 60)
    if minute.timestamp() <= run.fault_over_at:
        return
    due = {name for name, spec in run.crontabs.items() if slots_of(spec).is_window(minute)}
    deadline = time.time() + limit
    while time.time() < deadline:
        if all(
            due <= {a.entry for a in run.collector.arrivals(side.queue) if a.window == minute}
            for side in run.safebeat_sides()
        ):
            run.event(f"every crontab window of {minute:%H:%M} UTC sent")
            return
        time.sleep(0.5)
    run.event(f"not every crontab window of {minute:%H:%M} UTC sent within {limit:g}s")


def long_outage(run: Run) -> None:
    """Stop every replica; move the store's state hours into the past; start them again."""
    outage = timedelta(hours=run.mode.outage_hours)
    stopping = time.monotonic()
    for side in run.sides:
        side.stop()
    codes = sorted({p.returncode for s in run.sides for r in s.everyone() for p in r.processes})
    run.fault(
        f"every replica stopped (SIGTERM, exit codes {codes}, "
        f"{time.monotonic() - stopping:.1f}s); {len(run.crontabs)} crontab entries"
    )
    time.sleep(0.2)  # the collector takes the last messages sent before the stop
    moment = time.time()
    for side in run.safebeat_sides():
        assert side.store_url is not None
        move = _move_redis_state_back if side.kind == REDIS else _move_state_back
        move(side.store_url, side.namespace, outage)
    run.shifted = (moment, outage)
    run.fault(f"the stores' state moved {run.mode.outage_hours:g} h into the past")
    for side in run.sides:
        for slot in range(run.replicas):
            side.start(slot)
    run.fault_over("every replica started again")
    run.wait_resumed(60)
    _wait_caught_up(run, 60)
    if run.mode.scale > 1:
        # The published runs also see every crontab entry's next window, live; the short
        # mode sees one only when a minute turns by chance after the restart.
        run.sleep(60 - time.time() % 60)
        run.event("a minute turned after the catch-up: every crontab entry has a live window")
    _wait_minute_sent(run, 90)
    run.sleep(run.mode.settle + 1.0)
    _wait_minute_sent(run, 90)  # a minute that turned meanwhile


CHANGED_ENTRY_ARGS = ["v2"]


def rolling_deploy(run: Run) -> None:
    """Replace the replicas one by one; the new ones send one entry with different args."""
    changed = {name: dict(spec) for name, spec in run.schedule.items()}
    first = next(iter(changed))
    changed[first]["args"] = CHANGED_ENTRY_ARGS
    for slot in range(run.replicas):
        run.at_window_boundary()
        fresh = [side.start(slot, schedule=changed) for side in run.sides]
        for replica in fresh:
            replica.wait_started(timeout=120)
        for side in run.sides:
            side.slots[slot][-2].stop()  # SIGTERM, as a rolling update does
        run.fault(f"replica {slot} replaced by one with {first}'s new args")
        run.sleep(0.5 * run.mode.scale)
    run.fault_over("every replica runs the new definition")
    _recover(run)


def baseline(run: Run) -> None:
    """No fault: many replicas, many entries."""
    run.sleep(8.0 * run.mode.scale)
    run.sleep(run.mode.settle)


SCENARIOS = [
    Scenario("kill", "SIGKILL a random replica every few seconds, restart it", ALL_STORES,
             kill_and_restart),
    Scenario("freeze", "SIGSTOP a replica past the lock TTL and claim timeout, SIGCONT",
             ALL_STORES, freeze_past_every_timeout),
    Scenario("store-restart", "crash and restart the store server", SHARED_STORES,
             restart_the_store, store_fault=True),
    Scenario("store-cut", "cut one replica's store connection, restore it", SHARED_STORES,
             cut_one_replica_off, store_fault=True, before_start=_proxy_replica_zero),
    Scenario("broker-down", "broker down, then back", ALL_STORES, broker_down),
    Scenario("broker-cut", "cut one replica's broker connection, restore it", ALL_STORES,
             cut_one_replica_from_the_broker, before_start=_proxy_replica_zero_broker,
             claim_timeout=BROKER_CUT_CLAIM_TIMEOUT),
    Scenario("clock-skew", "replica clocks skewed by +/-120 s (libfaketime)", SHARED_STORES,
             skewed_clocks, before_start=_skew_clock),
    Scenario("rolling-deploy", "replicas replaced one by one, one entry's args changed",
             ALL_STORES, rolling_deploy),
    Scenario("long-outage", "thousands of crontabs; every replica stopped, the store's state "
             "moved 12 h back, replicas started again", SHARED_STORES, long_outage,
             store_fault=True, crontabs=True, with_stock=False, stops_every_replica=True,
             short_stores=(POSTGRES,)),
    Scenario("baseline", "no fault: many replicas, many entries", ALL_STORES, baseline),
]  # fmt: skip
BY_KEY = {scenario.key: scenario for scenario in SCENARIOS}


def unavailable(scenario: Scenario) -> str | None:
    """Why `scenario` cannot run on this machine, or None."""
    if scenario.key == "clock-skew" and faketime_library() is None:
        return (
            "libfaketime is not installed (Debian package `faketime`; .ci/run installs it "
            "when run as root)"
        )
    return None
