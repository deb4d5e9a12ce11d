"""The ten chaos scenarios: what each one does to the replicas, the store or the broker.

Every fault hits every side of the run at the same moment (stock beat included, where the
fault exists for it: stock beat has no store). Process faults are timed a few milliseconds
after a whole second, when the replicas are in the middle of a tick: claiming, publishing
or recording. Durations are those of the short mode; `Mode.scale` stretches them.
"""

from __future__ import annotations

import signal
import time

from tests.chaos.lab import faketime_library, skewed_clock_env
from tests.chaos.outage import long_outage
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
    run.fault(f"replica 0 cut off from the broker for {outage:g}s or more")
    run.sleep(outage)
    # The fault counts only once replica 0 has tried the broker (it tries when it wins a
    # tick): under load the others may win every tick of a short cut.
    proxies = [side.proxy for side in run.sides if side.proxy is not None]
    deadline = time.monotonic() + 30.0
    while any(proxy.refused == 0 for proxy in proxies) and time.monotonic() < deadline:
        run.sleep(0.2)
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
