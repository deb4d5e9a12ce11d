"""What the contract's cases share: two replicas, plans, claims and runs made in a line,
and the scaffolds that race store instances against each other."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TypeVar

from safebeat.beat.planning import plan_tick
from safebeat.config import Config
from safebeat.entries import Entry, compile_entry
from safebeat.identity import Replica, task_id_for
from safebeat.stores.protocols import (
    Claim,
    Definition,
    EntryState,
    LeasedRun,
    NewClaim,
    Outcome,
    Reclaim,
    ReclaimPage,
    RunEnd,
    Start,
    Store,
    TickPlan,
)

REPLICA = Replica("host-a", 101, "aaaaaa")
OTHER = Replica("host-b", 202, "bbbbbb")
SECOND = timedelta(seconds=1)

T = TypeVar("T")

#: What `StoreContract.open_store` yields: each call a new store instance over the same
#: backing data (two replicas of one app), migrated.
StoreFactory = Callable[[], Store]


def registered(
    store: Store, namespace: str, definitions: Sequence[Definition], replica: Replica
) -> dict[str, EntryState]:
    """Register `definitions` in `store`; the states of those entries afterwards."""
    store.register(namespace, definitions, replica)
    names = {d.name for d in definitions}
    return {name: state for name, state in store.states(namespace).items() if name in names}


Planner = Callable[[datetime, Mapping[str, EntryState]], TickPlan]


def returning(plan: TickPlan) -> Planner:
    """A planner that returns `plan`, whatever the time and states."""
    return lambda now, states: plan


def definitions(*names: str, schedule: str = "every 1s", digest: str = "d1") -> list[Definition]:
    return [Definition(name, schedule, digest) for name in names]


def claim_plan(entry: str, namespace: str, *windows: datetime) -> TickPlan:
    claims = [NewClaim(entry, w, task_id_for(namespace, entry, w), "tasks.run") for w in windows]
    return TickPlan(claims=claims, advances={entry: max(windows)})


def window_after(state: EntryState, seconds: int) -> datetime:
    return state.anchor + seconds * SECOND


def every_tenth_of_a_second() -> Entry:
    return compile_entry(
        "e", {"task": "tasks.run", "schedule": 0.1}, app_timezone=timezone.utc, config=Config()
    )


def tick_until_claimed(store: Store, namespace: str, planner: Callable[..., TickPlan]) -> Claim:
    """Tick `store` with `planner` until it claims a window (windows come every 0.1 s)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        result = store.tick(namespace, ["e"], planner, replica=REPLICA)
        if result is not None and result.claimed:
            return result.claimed[-1]
        time.sleep(0.02)
    raise AssertionError("no window was claimed in 10 s")


class OnlyMembership(Container[str]):
    """The entries a replica defines, answering only `in` (neither iteration nor length),
    recording each name it was asked about."""

    def __init__(self, names: Iterable[str]) -> None:
        self._names = frozenset(names)
        self.asked: list[str] = []

    def __contains__(self, name: object) -> bool:
        self.asked.append(str(name))
        return name in self._names


@dataclass(frozen=True)
class TakeOverPass:
    """What one take-over pass did: the claims it took over and the page it read."""

    reclaimed: list[Claim]
    reclaim_page: ReclaimPage


def take_over_pass(store: Store, namespace: str, reclaim: Reclaim) -> TakeOverPass:
    """One tick of another replica that claims nothing and takes over per `reclaim`."""
    result = store.tick(namespace, [], lambda now, s: TickPlan(), replica=OTHER, reclaim=reclaim)
    assert result is not None
    assert result.reclaim_page is not None
    return TakeOverPass(list(result.reclaimed), result.reclaim_page)


def stale_claims_of(
    store: Store, namespace: str, state: EntryState, windows: int, *, timeout: timedelta
) -> list[Claim]:
    """Claim `windows` windows of `state`'s entry in one tick and hand them back: stale for
    a take-over with `timeout`, all claimed at one instant (as a tick's claims are)."""
    name = state.name
    plan = claim_plan(name, namespace, *(window_after(state, n) for n in range(1, windows + 1)))
    result = store.tick(namespace, [name], lambda now, s: plan, replica=REPLICA)
    assert result is not None
    assert len(result.claimed) == windows
    store.release_claims(namespace, result.claimed, replica=REPLICA, timeout=timeout)
    return list(result.claimed)


HOUR = timedelta(hours=1)


def dispatched(store: Store, namespace: str, seconds: int = 1) -> datetime:
    """Register entry "a", claim its window `seconds` after the anchor; return the window."""
    state = registered(store, namespace, definitions("a"), REPLICA)["a"]
    window = window_after(state, seconds)
    store.tick(namespace, ["a"], lambda now, s: claim_plan("a", namespace, window), replica=REPLICA)
    return window


def start(
    store: Store,
    namespace: str,
    window: datetime,
    *,
    worker: str = "w1@host:1",
    retries: int = 0,
    lease: timedelta = HOUR,
    exclusive: bool = False,
) -> Start:
    """Start entry "a"'s execution of `window` (worker w1, first try, a lease of an hour)."""
    run = LeasedRun("a", window, worker, retries)
    return store.start_execution(namespace, run, lease=lease, exclusive=exclusive)


def finish(
    store: Store,
    namespace: str,
    window: datetime,
    outcome: Outcome = Outcome.SUCCESS,
    *,
    worker: str = "w1@host:1",
    retries: int = 0,
    runtime: timedelta = timedelta(seconds=1),
    detail: str | None = None,
) -> None:
    """Record the end of entry "a"'s execution of `window` (worker w1, first try, success)."""
    run = LeasedRun("a", window, worker, retries)
    store.finish_execution(namespace, run, RunEnd(outcome, runtime, detail))


def retry_taken_over(store: Store, namespace: str) -> datetime:
    """Dispatch entry "a"'s window; its run (w1) ends asking for a retry, the retry (w2,
    retries 1) runs and dies at once, and beat's re-published delivery (w3, retries 0)
    takes it over. The window."""
    window = dispatched(store, namespace)
    start(store, namespace, window)
    finish(store, namespace, window, outcome=Outcome.RETRY)
    died = start(store, namespace, window, worker="w2@host:2", retries=1, lease=timedelta(0))
    assert died is Start.RUN
    assert start(store, namespace, window, worker="w3@host:3") is Start.TAKEOVER
    return window


def tick_and_read(store: Store, namespace: str) -> tuple[EntryState, EntryState]:
    """Entry "a"'s state as a tick of REPLICA that plans nothing sees it, and as `states`
    reads it afterwards."""
    result = store.tick(namespace, ["a"], lambda now, s: TickPlan(), replica=REPLICA)
    assert result is not None
    return result.states["a"], store.states(namespace)["a"]


def row_of(store: Store, namespace: str, window: datetime) -> object:
    [row] = [r for r in store.history(namespace, "a") if r.window == window]
    return row


def claim_key(store: Store, namespace: str, owner: str, keep_for: timedelta = HOUR) -> bool:
    return store.claim_effect(
        namespace, '["report",17,"2026-03-02"]', owner=owner, keep_for=keep_for, task_id="t-1"
    )


#: Keys and names that a case-, accent- or trailing-space-insensitive comparison would merge.
LOOKALIKES = (
    "cus_AbC",
    "cus_abc",
    "jose",
    "josé",
    "invoice:17",
    "invoice:17 ",
    "Nightly",
    "nightly",
)


FENCE_POLICIES = {
    "skip": {"misfire": "skip"},
    "grace": {"misfire": "all", "grace": 0.3},
    "forbid": {"overlap": "forbid"},
}


def fence_entry(policy: str) -> Entry:
    """An entry every 0.1 s with `policy`'s options, so windows pass while a planner waits."""
    options = {"safebeat": FENCE_POLICIES[policy]}
    return compile_entry(
        "e",
        {"task": "tasks.run", "schedule": 0.1, "options": options},
        app_timezone=timezone.utc,
        config=Config(),
    )


def real_planner(entry: Entry, namespace: str) -> Callable[..., TickPlan]:
    def planner(now: datetime, states: Mapping[str, EntryState]) -> TickPlan:
        return plan_tick(
            {entry.name: entry},
            states,
            now,
            namespace=namespace,
            retry_after=SECOND,
        )

    return planner


def claimed(store: Store, namespace: str, entry: str, *seconds: int) -> list[Claim]:
    """REPLICA claims windows `seconds` after `entry`'s anchor; returns them in window order."""
    state = registered(store, namespace, definitions(entry), REPLICA)[entry]
    windows = [window_after(state, s) for s in seconds]
    result = store.tick(
        namespace, [entry], lambda now, s: claim_plan(entry, namespace, *windows), replica=REPLICA
    )
    assert result is not None
    return sorted(result.claimed, key=lambda c: c.window)


def take_over(store: Store, namespace: str, who: Replica, timeout: timedelta) -> list[Claim]:
    result = store.tick(
        namespace, ["a"], lambda now, s: TickPlan(), replica=who, reclaim=Reclaim(["a"], timeout)
    )
    assert result is not None
    return sorted(result.reclaimed, key=lambda c: c.window)


def race(
    stores: Sequence[Store], action: Callable[[Store, int], T], *, timeout: float = 30
) -> list[T]:
    """Run `action(store, index)` for every store at once, each in a thread of its own,
    released together by a barrier; what the actions returned, in the order they returned.
    An exception in an action is raised here, after every thread ended."""
    barrier = threading.Barrier(len(stores))
    results: list[T] = []
    errors: list[BaseException] = []
    mutex = threading.Lock()

    def run(store: Store, index: int) -> None:
        try:
            barrier.wait(10)
            result = action(store, index)
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            with mutex:
                errors.append(exc)
            return
        with mutex:
            results.append(result)

    threads = [threading.Thread(target=run, args=(s, i)) for i, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not [t for t in threads if t.is_alive()], f"a racer was still running after {timeout} s"
    if errors:
        raise errors[0]
    return results


@contextmanager
def tick_lock_held(store: Store, namespace: str, entries: list[str]) -> Iterator[None]:
    """While inside, REPLICA's tick of `entries` in `store` holds the tick lock: its planner
    waits until the block ends."""
    inside, release = threading.Event(), threading.Event()

    def slow_planner(now: datetime, states: Mapping[str, EntryState]) -> TickPlan:
        inside.set()
        release.wait(10)
        return TickPlan()

    thread = threading.Thread(
        target=store.tick, args=(namespace, entries, slow_planner), kwargs={"replica": REPLICA}
    )
    thread.start()
    try:
        assert inside.wait(10)
        yield
    finally:
        release.set()
        thread.join(10)
