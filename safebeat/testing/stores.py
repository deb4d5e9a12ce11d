"""The store contract: every case a store must pass, importable so that a store living in
another package runs the same suite as safebeat's own backends.

It needs pytest, which safebeat does not depend on: importing this module imports pytest,
and nothing in safebeat imports this module. Subclass `StoreContract` in a test module
(its name must start with `Test`) and override its `open_store` fixture::

    import pytest
    from safebeat.testing.stores import StoreContract

    class TestMyStore(StoreContract):
        @pytest.fixture
        def open_store(self, tmp_path):
            opened = []

            def factory():
                store = MyStore(f"mystore://{tmp_path}/db")
                store.migrate()
                opened.append(store)
                return store

            yield factory
            for store in opened:
                store.close()

Each call of the factory returns a new store instance over the same backing data, as two
replicas of one app see it; safebeat's own backends run every case here through
`tests/integration/test_store_contract.py`.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest

from safebeat.beat.planning import plan_tick
from safebeat.config import Config
from safebeat.entries import Entry, compile_entry
from safebeat.identity import Replica, task_id_for
from safebeat.records import Pause
from safebeat.stores.base import (
    AuditAction,
    AuditEvent,
    Claim,
    Definition,
    EntryState,
    LeasedRun,
    NewClaim,
    NewSkip,
    Outcome,
    Reclaim,
    ReclaimPage,
    RunEnd,
    Start,
    Status,
    Store,
    TickPlan,
)

REPLICA = Replica("host-a", 101, "aaaaaa")
OTHER = Replica("host-b", 202, "bbbbbb")
SECOND = timedelta(seconds=1)

#: What `StoreContract.open_store` yields: each call a new store instance over the same
#: backing data (two replicas of one app), migrated.
StoreFactory = Callable[[], Store]

__all__ = ["OTHER", "REPLICA", "StoreContract", "StoreFactory"]


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
    *,
    worker: str = "w1@host:1",
    retries: int = 0,
    outcome: Outcome = Outcome.SUCCESS,
    runtime: timedelta = timedelta(seconds=1),
    detail: str | None = None,
) -> None:
    """Record the end of entry "a"'s execution of `window` (worker w1, first try, success)."""
    run = LeasedRun("a", window, worker, retries)
    store.finish_execution(namespace, run, RunEnd(outcome, runtime, detail))


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


class StoreContract:
    """The cases every store passes. Subclass it as `Test<YourStore>` and override
    `open_store`; override `tick_lock_taken_back` and `namespaces_share_tick_lock` where
    your store's tick lock behaves as their docstrings say.

    Cases needing several replicas call `open_store` more than once; the rest use `store`.
    """

    @pytest.fixture
    def open_store(self) -> StoreFactory:
        """Yield a factory of migrated store instances sharing one backing store; close
        them afterwards. Every subclass overrides this fixture."""
        pytest.fail(f"{type(self).__name__} must override the open_store fixture")

    @pytest.fixture
    def store(self, open_store: StoreFactory) -> Store:
        """One store instance from `open_store`."""
        return open_store()

    @pytest.fixture
    def namespace(self) -> str:
        """A namespace no other case uses, so cases can share one database."""
        return f"contract-{uuid.uuid4().hex[:12]}"

    @pytest.fixture
    def tick_lock_taken_back(self) -> bool:
        """Whether the store takes its tick lock back from a holder frozen for longer than
        the lock timeout (as PostgreSQL's idle-in-transaction timeout or a Redis TTL do),
        so other replicas tick meanwhile. False: the case that checks what a frozen replica
        writes on resuming checks only that no window ends both skipped and claimed."""
        return False

    @pytest.fixture
    def namespaces_share_tick_lock(self) -> bool:
        """Whether all namespaces of one store share one tick lock (SQLite's one write lock
        per file); True skips the case that two namespaces never wait for each other."""
        return False

    def test_migrate_is_idempotent(self, store: Store) -> None:
        """Migrating twice leaves the schema at the same version."""
        first = store.migrate()
        assert first >= 1
        assert store.migrate() == first

    def test_a_migrated_store_reports_the_schema_version_this_safebeat_writes(
        self, store: Store
    ) -> None:
        """After migrate, schema_version() is expected_schema_version, and the backend's own
        checks answer (a list, each with what it found)."""
        store.migrate()
        assert store.schema_version() == store.expected_schema_version >= 1
        assert all(check.name and check.found for check in store.checks())

    def test_clock_is_aware_utc_and_moves_forward(self, store: Store) -> None:
        """The store clock returns aware instants that do not go backwards."""
        first, second = store.clock(), store.clock()
        assert first.utcoffset() == timedelta(0)
        assert second >= first

    def test_register_creates_state_anchored_to_the_second(
        self, store: Store, namespace: str
    ) -> None:
        """A new entry gets anchor = registration instant truncated to the second, no last
        window."""
        before = store.clock()
        registration = store.register(namespace, definitions("a", "b"), REPLICA)
        assert registration.changed == {}
        states = store.states(namespace)
        assert set(states) == {"a", "b"}
        state = states["a"]
        assert state.last_window is None
        assert state.anchor == state.defined_at.replace(microsecond=0)
        assert state.defined_at >= before
        assert state.decided_until == state.defined_at

    def test_register_same_definition_changes_nothing(self, store: Store, namespace: str) -> None:
        """Registering an unchanged definition again (a restart) keeps the shared state."""
        first = registered(store, namespace, definitions("a"), REPLICA)["a"]
        again = store.register(namespace, definitions("a"), OTHER)
        assert again.changed == {}
        assert store.states(namespace)["a"] == first

    def test_changed_arguments_keep_windows_but_are_reported(
        self, store: Store, namespace: str
    ) -> None:
        """A new digest with the same schedule is reported and keeps defined_at and the anchor."""
        first = registered(store, namespace, definitions("a", digest="d1"), REPLICA)["a"]
        again = store.register(namespace, definitions("a", digest="d2"), OTHER)
        assert again.changed == {"a": "d1"}
        state = store.states(namespace)["a"]
        assert state.digest == "d2"
        assert state.defined_at == first.defined_at
        assert state.anchor == first.anchor

    def test_changed_schedule_moves_defined_at(self, store: Store, namespace: str) -> None:
        """A changed schedule text moves defined_at to now, so old windows cannot fire late."""
        first = registered(store, namespace, definitions("a", digest="d1"), REPLICA)["a"]
        changed = registered(
            store, namespace, definitions("a", schedule="every 2s", digest="d2"), OTHER
        )["a"]
        assert changed.schedule == "every 2s"
        assert changed.defined_at > first.defined_at
        assert changed.anchor == first.anchor

    def test_registering_again_never_reopens_a_claimed_window(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """Unchanged definitions registered again, by a retry and by two replicas at once,
        move no entry's state back: anchor, defined_at and last window stay, and the windows
        claimed after it are new ones, each claimed once. 1,500 more entries make a store that
        registers in slices use more than one."""
        stores = [open_store(), open_store()]
        entry = every_tenth_of_a_second()
        planner = real_planner(entry, namespace)
        schedule = [entry.definition, *definitions(*(f"f{i}" for i in range(1500)))]
        first = registered(stores[0], namespace, schedule, REPLICA)
        assert len({(s.anchor, s.defined_at) for s in first.values()}) == 1
        tick_until_claimed(stores[0], namespace, planner)
        decided = stores[0].states(namespace)["e"]
        barrier = threading.Barrier(len(stores))

        def register(store: Store, replica: Replica) -> None:
            barrier.wait(10)
            store.register(namespace, schedule, replica)

        threads = [
            threading.Thread(target=register, args=(s, r))
            for s, r in zip(stores, (REPLICA, OTHER), strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        registration = stores[1].register(namespace, schedule, OTHER)  # a retry
        assert registration.changed == {}
        states = stores[1].states(namespace)
        assert {n: s.anchor for n, s in states.items()} == {n: s.anchor for n, s in first.items()}
        again = states["e"]
        assert (again.anchor, again.defined_at, again.last_window) == (
            decided.anchor,
            decided.defined_at,
            decided.last_window,
        )
        assert decided.last_window is not None
        assert tick_until_claimed(stores[1], namespace, planner).window > decided.last_window
        windows = [r.window for r in stores[0].history(namespace, "e", limit=10_000) if r.task_id]
        assert len(windows) == len(set(windows))

    def test_a_claimed_window_is_never_claimed_again_whatever_the_state_says(
        self, store: Store, namespace: str
    ) -> None:
        """The unique key alone refuses a second claim: a plan that claims a window again
        without the last window having moved past it (no advance) claims nothing."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        window = window_after(state, 1)
        claim = NewClaim("a", window, task_id_for(namespace, "a", window), "tasks.run")
        plan = TickPlan(claims=[claim], advances={})
        first = store.tick(namespace, ["a"], lambda now, s: plan, replica=REPLICA)
        again = store.tick(namespace, ["a"], lambda now, s: plan, replica=OTHER)
        assert first is not None
        assert again is not None
        assert [c.window for c in first.claimed] == [window]
        assert store.states(namespace)["a"].last_window is None
        assert again.claimed == []

    def test_each_window_is_claimed_once(self, store: Store, namespace: str) -> None:
        """Claiming a window that is already claimed returns nothing and is not an error."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        plan = claim_plan("a", namespace, window_after(state, 1), window_after(state, 2))
        first = store.tick(namespace, ["a"], lambda now, s: plan, replica=REPLICA)
        again = store.tick(namespace, ["a"], lambda now, s: plan, replica=OTHER)
        assert first is not None
        assert again is not None
        assert sorted(c.window for c in first.claimed) == [
            window_after(state, 1),
            window_after(state, 2),
        ]
        assert again.claimed == []
        assert all(c.attempts == 1 for c in first.claimed)
        assert first.claimed[0].task_id == task_id_for(namespace, "a", first.claimed[0].window)

    def test_a_tick_returns_the_plan_its_planner_made(self, store: Store, namespace: str) -> None:
        """The tick result carries the planner's own plan object back, so whatever the planner
        decided besides the rows (the next windows, the entries that failed) reaches the
        scheduler after the commit."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        plan = claim_plan("a", namespace, window_after(state, 1))
        result = store.tick(namespace, ["a"], lambda now, s: plan, replica=REPLICA)
        assert result is not None
        assert result.plan is plan

    def test_concurrent_replicas_never_claim_a_window_twice(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """Replicas racing over the same windows claim each exactly once between them."""
        stores = [open_store() for _ in range(3)]
        state = registered(stores[0], namespace, definitions("a"), REPLICA)["a"]
        windows = [window_after(state, k) for k in range(1, 41)]
        claimed: list[datetime] = []
        mutex = threading.Lock()

        def replica(store: Store, who: Replica) -> None:
            for window in windows:
                plan = claim_plan("a", namespace, window)
                while True:
                    result = store.tick(namespace, ["a"], returning(plan), replica=who)
                    if result is not None:
                        break
                    # Lock busy: yield the interpreter to the holder, as beat's busy retry
                    # does (three threads spinning kept it from finishing within 60 s on a
                    # loaded machine).
                    time.sleep(0.001)
                with mutex:
                    claimed.extend(c.window for c in result.claimed)

        threads = [
            threading.Thread(target=replica, args=(s, Replica(f"h{i}", i, "t")))
            for i, s in enumerate(stores)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not [t for t in threads if t.is_alive()], "a replica was still ticking after 120 s"
        assert sorted(claimed) == windows

    def test_a_skipped_window_cannot_be_claimed(self, store: Store, namespace: str) -> None:
        """A skip row occupies its window's key: no replica can claim that window afterwards."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        window = window_after(state, 3)
        skip = NewSkip("a", window, window_after(state, 1), 3, "missed")
        store.tick(namespace, ["a"], lambda now, s: TickPlan(skips=[skip]), replica=REPLICA)
        result = store.tick(
            namespace,
            ["a"],
            lambda now, s: claim_plan("a", namespace, window),
            replica=OTHER,
        )
        assert result is not None
        assert result.claimed == []
        [row] = store.history(namespace, "a")
        assert (row.status, row.reason, row.skipped_count) == (Status.SKIPPED, "missed", 3)
        assert row.skipped_from == window_after(state, 1)

    def test_last_window_only_moves_forward(self, store: Store, namespace: str) -> None:
        """An advance to an older window never moves last_window back."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        newer, older = window_after(state, 5), window_after(state, 2)
        for window in (newer, older):
            result = store.tick(
                namespace,
                ["a"],
                returning(TickPlan(advances={"a": window})),
                replica=REPLICA,
            )
            assert result is not None
            assert result.states["a"].last_window == newer
        assert store.states(namespace)["a"].last_window == newer

    def test_tick_sees_states_and_the_store_clock(self, store: Store, namespace: str) -> None:
        """The planner gets the store's now and exactly the states of the requested entries."""
        store.register(namespace, definitions("a", "b", "c"), REPLICA)
        seen: dict[str, object] = {}

        def planner(now: datetime, states: Mapping[str, EntryState]) -> TickPlan:
            seen["now"], seen["names"] = now, set(states)
            return TickPlan()

        before = store.clock()
        result = store.tick(namespace, ["a", "c"], planner, replica=REPLICA)
        assert result is not None
        assert seen["names"] == {"a", "c"}
        assert isinstance(seen["now"], datetime)
        assert seen["now"] >= before
        assert result.now == seen["now"]

    def test_busy_tick_lock_returns_none(self, open_store: StoreFactory, namespace: str) -> None:
        """While one replica is inside its tick, another replica's tick reports the lock busy."""
        holder, other = open_store(), open_store()
        holder.register(namespace, definitions("a"), REPLICA)
        inside, release = threading.Event(), threading.Event()

        def slow_planner(now: datetime, states: Mapping[str, EntryState]) -> TickPlan:
            inside.set()
            release.wait(10)
            return TickPlan()

        thread = threading.Thread(
            target=holder.tick,
            args=(namespace, ["a"], slow_planner),
            kwargs={"replica": REPLICA},
        )
        thread.start()
        try:
            assert inside.wait(10)
            busy = other.tick(namespace, ["a"], lambda now, s: TickPlan(), replica=OTHER)
            assert busy is None
        finally:
            release.set()
            thread.join(10)
        after = other.tick(namespace, ["a"], lambda now, s: TickPlan(), replica=OTHER)
        assert after is not None

    def test_other_namespaces_do_not_share_the_tick_lock(
        self, open_store: StoreFactory, namespace: str, namespaces_share_tick_lock: bool
    ) -> None:
        """Two apps in one store (different namespaces) never wait for each other's lock."""
        holder, other = open_store(), open_store()
        if namespaces_share_tick_lock:
            pytest.skip("SQLite has one write lock per file: namespaces share it by design")
        inside, release = threading.Event(), threading.Event()

        def slow_planner(now: datetime, states: Mapping[str, EntryState]) -> TickPlan:
            inside.set()
            release.wait(10)
            return TickPlan()

        thread = threading.Thread(
            target=holder.tick,
            args=(namespace, [], slow_planner),
            kwargs={"replica": REPLICA},
        )
        thread.start()
        try:
            assert inside.wait(10)
            result = other.tick(namespace + "-other", [], lambda now, s: TickPlan(), replica=OTHER)
            assert result is not None
        finally:
            release.set()
            thread.join(10)

    def test_stale_claims_are_taken_over_once(self, store: Store, namespace: str) -> None:
        """An unsent claim past the timeout is handed to one replica, with attempts counted."""
        state = registered(store, namespace, definitions("a", "b"), REPLICA)["a"]
        window = window_after(state, 1)
        store.tick(
            namespace,
            ["a"],
            lambda now, s: claim_plan("a", namespace, window),
            replica=REPLICA,
        )

        def tick(who: Replica, timeout: timedelta | None, names: list[str]) -> list[object]:
            reclaim = None if timeout is None else Reclaim(names, timeout)
            result = store.tick(
                namespace, names, lambda now, s: TickPlan(), replica=who, reclaim=reclaim
            )
            assert result is not None
            return list(result.reclaimed)

        assert tick(OTHER, None, ["a"]) == []
        assert tick(OTHER, timedelta(hours=1), ["a"]) == []
        assert tick(OTHER, timedelta(0), ["b"]) == []  # only entries this replica knows
        [taken] = tick(OTHER, timedelta(0), ["a"])
        assert (taken.entry, taken.window, taken.attempts) == ("a", window, 2)  # type: ignore[attr-defined]
        assert taken.task_id == task_id_for(namespace, "a", window)  # type: ignore[attr-defined]
        assert tick(REPLICA, timedelta(seconds=30), ["a"]) == []  # fresh again after the takeover
        [row] = store.history(namespace, "a")
        assert (row.replica, row.host, row.pid) == (OTHER.id, OTHER.host, OTHER.pid)

    def test_a_take_over_pass_finds_stale_claims_without_the_entry_list(
        self, store: Store, namespace: str
    ) -> None:
        """The take-over finds the namespace's stale claims itself, oldest first, and only asks
        `in defines` of their entries: what it costs follows the stale claims, never the entries
        a replica defines; a claim of an entry the replica does not define stays for another."""
        idle = [f"idle-{i}" for i in range(50)]
        states = registered(store, namespace, definitions("a", "b", "c", *idle), REPLICA)
        for name in ("a", "b", "c"):  # handed back in this order: a is the oldest
            window = window_after(states[name], 1)
            result = store.tick(
                namespace,
                [name],
                returning(claim_plan(name, namespace, window)),
                replica=REPLICA,
            )
            assert result is not None
            store.release_claims(namespace, result.claimed, replica=REPLICA, timeout=HOUR)

        def take_over(defines: OnlyMembership, limit: int = 1000) -> list[str]:
            result = store.tick(
                namespace,
                [],
                lambda now, s: TickPlan(),
                replica=OTHER,
                reclaim=Reclaim(defines, HOUR, limit),
            )
            assert result is not None
            return [claim.entry for claim in result.reclaimed]

        defines = OnlyMembership(["a", "c", *idle])
        assert take_over(defines, limit=1) == ["a"]  # the oldest of those it defines
        assert set(defines.asked) <= {"a", "b", "c"}  # never the idle entries
        assert take_over(OnlyMembership(["a", "c", *idle])) == ["c"]  # a is fresh again
        assert take_over(OnlyMembership(["b"])) == ["b"]  # left for a replica defining it

    def test_a_take_over_pass_reads_a_page_and_the_next_goes_on_after_it(
        self, store: Store, namespace: str
    ) -> None:
        """A pass reads at most `page` stale claims and takes at most `limit`; passes that go
        on from where the last ended (`ReclaimPage.resume`) reach a stale claim of an entry
        the replica defines behind more stale claims of entries nobody defines than a page
        holds, within the pages needed plus one, then start from the oldest again."""
        gone = [f"gone-{i}" for i in range(3)]
        states = registered(store, namespace, definitions("mine", *gone), REPLICA)
        for name in gone:  # 12 stale claims nobody takes, in 3 instants of 4 claims
            stale_claims_of(store, namespace, states[name], 4, timeout=HOUR)
        [mine] = stale_claims_of(store, namespace, states["mine"], 1, timeout=HOUR)
        page, limit = 5, 2
        after = None
        reads: list[int] = []
        taken: list[Claim] = []
        for _ in range(12 // page + 1 + 1):
            result = take_over_pass(store, namespace, Reclaim({"mine"}, HOUR, limit, page, after))
            assert result.reclaim_page.read <= page
            assert len(result.reclaimed) <= limit
            reads.append(result.reclaim_page.read)
            taken.extend(result.reclaimed)
            after = result.reclaim_page.resume
            if taken:
                break
        assert [(c.id, c.entry, c.attempts) for c in taken] == [(mine.id, "mine", 2)]
        assert reads == [5, 5, 3]  # the gone claims a page at a time, then the rest and mine
        assert after is None  # read to the end: the next pass starts from the oldest again
        again = take_over_pass(store, namespace, Reclaim({"mine"}, HOUR, limit, page, after))
        assert (again.reclaimed, again.reclaim_page.read) == ([], 5)

    def test_a_take_over_pass_that_reaches_its_limit_leaves_the_rest_of_its_page_to_the_next(
        self, store: Store, namespace: str
    ) -> None:
        """A pass that takes `limit` claims ends at the last one it took, so the next pass
        takes the stale claims after it in the same page, oldest first: none waits for the
        passes to come round again."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        stale = stale_claims_of(store, namespace, state, 6, timeout=HOUR)
        after = None
        passes: list[list[datetime]] = []
        for _ in range(3):
            result = store.tick(
                namespace,
                [],
                lambda now, s: TickPlan(),
                replica=OTHER,
                reclaim=Reclaim({"a"}, HOUR, limit=2, page=5, after=after),
            )
            assert result is not None
            assert result.reclaim_page is not None
            passes.append([claim.window for claim in result.reclaimed])
            after = result.reclaim_page.resume
        windows = sorted(claim.window for claim in stale)
        assert passes == [windows[0:2], windows[2:4], windows[4:6]]

    def test_a_dead_run_claimed_before_the_place_the_passes_reached_is_taken_when_they_come_round(
        self, store: Store, namespace: str
    ) -> None:
        """A run whose lease expired after the passes went past its claim time is not in the
        pages after their place; the pass after a short page starts from the oldest again
        and takes it over."""
        states = registered(store, namespace, definitions("a", "gone"), REPLICA)
        window = window_after(states["a"], 1)
        result = store.tick(
            namespace, ["a"], lambda now, s: claim_plan("a", namespace, window), replica=REPLICA
        )
        assert result is not None
        store.record_publish(namespace, [c.id for c in result.claimed], {})
        gone = [window_after(states["gone"], n) for n in range(1, 7)]
        store.tick(
            namespace,
            ["gone"],
            lambda now, s: claim_plan("gone", namespace, *gone),
            replica=REPLICA,
        )
        after = None

        def take_over() -> tuple[list[datetime], int]:
            nonlocal after
            result = store.tick(
                namespace,
                [],
                lambda now, s: TickPlan(),
                replica=OTHER,
                reclaim=Reclaim({"a"}, timedelta(0), limit=2, page=5, after=after),
            )
            assert result is not None
            assert result.reclaim_page is not None
            after = result.reclaim_page.resume
            return [claim.window for claim in result.reclaimed], result.reclaim_page.read

        assert take_over() == ([], 5)  # five of the six unsent claims nobody defines
        start(store, namespace, window, lease=timedelta(0))  # its run dies at once
        assert take_over() == ([], 1)  # the sixth: a short page, so the passes come round
        assert take_over() == ([window], 5)  # the dead run first, claimed before the others

    def test_publish_outcomes_are_recorded(self, store: Store, namespace: str) -> None:
        """Sent claims get sent_at, failed ones their error; neither is taken over again."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        result = store.tick(
            namespace,
            ["a"],
            lambda now, s: claim_plan(
                "a", namespace, window_after(state, 1), window_after(state, 2)
            ),
            replica=REPLICA,
        )
        assert result is not None
        first, second = sorted(result.claimed, key=lambda c: c.window)
        store.record_publish(namespace, [first.id], {second.id: "EncodeError: bad kwargs"})
        rows = {r.window: r for r in store.history(namespace, "a")}
        assert rows[first.window].status is Status.SENT
        assert rows[first.window].sent_at is not None
        assert rows[second.window].status is Status.FAILED
        assert rows[second.window].error == "EncodeError: bad kwargs"
        again = store.tick(
            namespace,
            ["a"],
            lambda now, s: TickPlan(),
            replica=OTHER,
            reclaim=Reclaim(["a"], timedelta(0)),
        )
        assert again is not None
        assert again.reclaimed == []

    def test_a_dead_run_is_claimed_again_once_and_its_delivery_takes_it_over(
        self, store: Store, namespace: str
    ) -> None:
        """A sent window whose run's lease expired without a finish is handed back to beat once
        (status claimed, attempts counted, same task id); the re-published delivery takes the
        run over. Live and finished runs are left alone."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        dead, live, done = (window_after(state, n) for n in (1, 2, 3))
        result = store.tick(
            namespace,
            ["a"],
            lambda now, s: claim_plan("a", namespace, dead, live, done),
            replica=REPLICA,
        )
        assert result is not None
        store.record_publish(namespace, [c.id for c in result.claimed], {})
        start(store, namespace, dead, lease=timedelta(0))
        start(store, namespace, live)
        start(store, namespace, done, lease=timedelta(0))
        finish(store, namespace, done)

        def reclaimed() -> list[Claim]:
            after = store.tick(
                namespace,
                ["a"],
                lambda now, s: TickPlan(),
                replica=OTHER,
                reclaim=Reclaim(["a"], HOUR),
            )
            assert after is not None
            return list(after.reclaimed)

        [taken] = reclaimed()
        assert (taken.window, taken.attempts) == (dead, 2)
        assert taken.task_id == task_id_for(namespace, "a", dead)
        row = row_of(store, namespace, dead)
        assert (row.status, row.lease_until, row.replica) == (Status.CLAIMED, None, OTHER.id)  # type: ignore[attr-defined]
        assert reclaimed() == []  # taken once
        assert start(store, namespace, dead, worker="w2@host:2") is Start.TAKEOVER
        store.record_publish(namespace, [taken.id], {})
        assert reclaimed() == []  # the takeover holds a live lease

    def test_an_unsent_claim_whose_run_holds_a_live_lease_is_never_taken_over(
        self, store: Store, namespace: str
    ) -> None:
        """A claim left unrecorded past the claim timeout (its publish went out, recording it
        failed) whose run started and holds a live lease is left alone: taking it over would
        clear the lease and let a re-published copy take the live run over. Once the lease
        lapses without a finish, the run is dead and taken over; a claim never started is
        taken over as before."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        live, never = window_after(state, 1), window_after(state, 2)
        result = store.tick(
            namespace,
            ["a"],
            lambda now, s: claim_plan("a", namespace, live, never),
            replica=REPLICA,
        )
        assert result is not None
        start(store, namespace, live, lease=HOUR)  # recording the publish failed: still claimed

        def reclaimed() -> list[datetime]:
            after = store.tick(
                namespace,
                ["a"],
                lambda now, s: TickPlan(),
                replica=OTHER,
                reclaim=Reclaim(["a"], timedelta(0)),
            )
            assert after is not None
            return [claim.window for claim in after.reclaimed]

        assert reclaimed() == [never]
        row = row_of(store, namespace, live)
        assert (row.status, row.attempts) == (Status.CLAIMED, 1)  # type: ignore[attr-defined]
        assert row.lease_until is not None  # type: ignore[attr-defined]
        assert start(store, namespace, live, worker="w2@host:2") is Start.DEFER
        store.renew_executions(
            namespace, [LeasedRun("a", live, "w1@host:1", 0)], lease=timedelta(0)
        )
        assert live in reclaimed()  # its lease lapsed: the run is dead

    def test_heartbeats_are_the_replicas_heartbeat_instants_newest_first(
        self, store: Store, namespace: str
    ) -> None:
        """heartbeats lists what replicas lists, only the instants, newest first; empty for a
        namespace without replicas."""
        assert store.heartbeats(namespace) == []
        store.heartbeat(namespace, REPLICA, "1.0", {"a": "d1"})
        store.heartbeat(namespace, OTHER, "1.0", {"b": "d1"})
        assert store.heartbeats(namespace) == [r.heartbeat_at for r in store.replicas(namespace)]
        assert len(store.heartbeats(namespace)) == 2
        assert store.heartbeats(namespace) == sorted(store.heartbeats(namespace), reverse=True)

    def test_a_forgotten_replica_is_no_longer_listed(self, store: Store, namespace: str) -> None:
        """forget_replica (a clean stop) drops that replica at once, keeps the others, and may
        be called twice; a later heartbeat lists it again."""
        store.heartbeat(namespace, REPLICA, "1.0", {"a": "d1"})
        store.heartbeat(namespace, OTHER, "1.0", {"a": "d1"})
        store.forget_replica(namespace, REPLICA)
        assert [r.replica for r in store.replicas(namespace)] == [OTHER.id]
        store.forget_replica(namespace, REPLICA)
        store.forget_replica(f"{namespace}-none", OTHER)
        assert [r.replica for r in store.replicas(namespace)] == [OTHER.id]
        store.heartbeat(namespace, REPLICA, "1.0", {"a": "d1"})
        assert {r.replica for r in store.replicas(namespace)} == {REPLICA.id, OTHER.id}

    def test_namespaces_lists_those_with_registered_entries(
        self, store: Store, namespace: str
    ) -> None:
        """namespaces() lists, sorted, every namespace with a registered entry, and no other."""
        other, bare = f"{namespace}-b", f"{namespace}-c"
        assert namespace not in store.namespaces()
        store.register(other, definitions("b"), OTHER)
        store.register(namespace, definitions("a"), REPLICA)
        store.heartbeat(bare, REPLICA, "1.0", {})  # a heartbeat alone registers nothing
        found = store.namespaces()
        assert found == sorted(found)
        assert [n for n in found if n.startswith(namespace)] == [namespace, other]

    def test_heartbeats_list_live_replicas(self, store: Store, namespace: str) -> None:
        """A heartbeat upserts the replica: started_at stays, heartbeat_at and definitions
        update."""
        store.heartbeat(namespace, REPLICA, "1.0", {"a": "d1"})
        [first] = store.replicas(namespace)
        store.heartbeat(namespace, REPLICA, "1.1", {"a": "d2", "b": "d3"})
        store.heartbeat(namespace, OTHER, "1.1", {})
        records = {r.replica: r for r in store.replicas(namespace)}
        assert set(records) == {REPLICA.id, OTHER.id}
        mine = records[REPLICA.id]
        assert mine.started_at == first.started_at
        assert mine.heartbeat_at >= first.heartbeat_at
        assert (mine.host, mine.pid, mine.version) == (REPLICA.host, REPLICA.pid, "1.1")
        assert dict(mine.definitions) == {"a": "d2", "b": "d3"}

    def test_a_heartbeat_without_definitions_keeps_them_and_refreshes_liveness(
        self, store: Store, namespace: str
    ) -> None:
        """A heartbeat with None (the digests did not change) says the record is there, moves
        its heartbeat_at to store now and keeps its definitions, version and started_at."""
        assert store.heartbeat(namespace, REPLICA, "1.0", {"a": "d1", "b": "d2"}) is True
        [first] = store.replicas(namespace)
        between = store.clock()
        assert store.heartbeat(namespace, REPLICA, "1.1", None) is True
        [mine] = store.replicas(namespace)
        assert mine.heartbeat_at >= between > first.heartbeat_at
        assert (mine.started_at, mine.version) == (first.started_at, "1.0")
        assert dict(mine.definitions) == {"a": "d1", "b": "d2"}

    def test_a_heartbeat_without_definitions_never_recreates_a_lost_record(
        self, store: Store, namespace: str
    ) -> None:
        """A store that lost the record (never written, pruned, forgotten) answers False to a
        heartbeat with None and lists nothing; the full heartbeat that follows lists it again."""
        assert store.heartbeat(namespace, REPLICA, "1.0", None) is False
        store.heartbeat(namespace, REPLICA, "1.0", {"a": "d1"})
        store.prune(namespace, store.clock() + timedelta(seconds=1))
        assert store.heartbeat(namespace, REPLICA, "1.0", None) is False
        assert store.replicas(namespace) == []
        assert store.heartbeat(namespace, REPLICA, "1.0", {"a": "d1"}) is True
        assert [dict(r.definitions) for r in store.replicas(namespace)] == [{"a": "d1"}]

    def test_history_is_newest_first_and_filters_by_entry(
        self, store: Store, namespace: str
    ) -> None:
        """History lists the newest window first, and only the asked entry when given one."""
        state = registered(store, namespace, definitions("a", "b"), REPLICA)["a"]
        for entry in ("a", "b"):
            store.tick(
                namespace,
                [entry],
                returning(
                    claim_plan(entry, namespace, *(window_after(state, k) for k in (1, 2, 3)))
                ),
                replica=REPLICA,
            )
        rows = store.history(namespace, "a")
        assert [r.window for r in rows] == [window_after(state, k) for k in (3, 2, 1)]
        assert all(r.entry == "a" and r.status is Status.CLAIMED for r in rows)
        assert len(store.history(namespace)) == 6
        assert len(store.history(namespace, limit=2)) == 2

    def test_prune_removes_rows_claimed_before_the_cutoff(
        self, store: Store, namespace: str
    ) -> None:
        """Prune deletes dispatch rows and replicas older than the cutoff and nothing newer."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        store.tick(
            namespace,
            ["a"],
            lambda now, s: claim_plan("a", namespace, window_after(state, 1)),
            replica=REPLICA,
        )
        store.heartbeat(namespace, REPLICA, "1.0", {})
        assert store.prune(namespace, store.clock() - timedelta(hours=1)) == 0
        assert len(store.history(namespace)) == 1
        assert store.prune(namespace, store.clock() + timedelta(seconds=1)) == 1
        assert store.history(namespace) == []
        assert store.replicas(namespace) == []

    def test_namespaces_are_isolated(self, store: Store, namespace: str) -> None:
        """Entries, claims and replicas of one namespace are invisible to another."""
        other = namespace + "-other"
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        store.register(other, definitions("a"), REPLICA)
        window = window_after(state, 1)
        for ns in (namespace, other):
            result = store.tick(
                ns,
                ["a"],
                returning(claim_plan("a", ns, window)),
                replica=REPLICA,
            )
            assert result is not None
            assert len(result.claimed) == 1
        store.heartbeat(namespace, REPLICA, "1.0", {})
        assert store.replicas(other) == []
        assert set(store.states(other)) == {"a"}

    def test_failing_planner_claims_nothing(self, store: Store, namespace: str) -> None:
        """An exception inside the planner aborts the tick: no row is written, the lock is freed."""
        store.register(namespace, definitions("a"), REPLICA)

        def broken(now: datetime, states: Mapping[str, EntryState]) -> TickPlan:
            raise ZeroDivisionError("planner bug")

        with pytest.raises(ZeroDivisionError):
            store.tick(namespace, ["a"], broken, replica=REPLICA)
        assert store.history(namespace) == []
        assert store.tick(namespace, ["a"], lambda n, s: TickPlan(), replica=REPLICA)

    def test_instants_round_trip_exactly(self, store: Store, namespace: str) -> None:
        """Windows with microseconds come back as the same UTC instants."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        window = state.anchor + timedelta(seconds=1, microseconds=123456)
        store.tick(
            namespace,
            ["a"],
            lambda now, s: claim_plan("a", namespace, window),
            replica=REPLICA,
        )
        [row] = store.history(namespace, "a")
        assert row.window == window
        assert row.window.astimezone(timezone.utc) == window

    def test_first_delivery_runs_and_a_second_while_it_lives_is_deferred(
        self, store: Store, namespace: str
    ) -> None:
        """The first start of a window records it with a lease; a second delivery while that
        lease is alive is deferred and writes nothing."""
        window = dispatched(store, namespace)
        before = store.clock()
        assert start(store, namespace, window) is Start.RUN
        assert start(store, namespace, window, worker="w2@host:2") is Start.DEFER
        row = row_of(store, namespace, window)
        assert row.started_at is not None  # type: ignore[attr-defined]
        assert row.started_at >= before  # type: ignore[attr-defined]
        assert (row.worker, row.retries, row.runs, row.duplicates) == ("w1@host:1", 0, 1, 0)  # type: ignore[attr-defined]
        assert row.finished_at is None  # type: ignore[attr-defined]
        assert row.status is Status.CLAIMED  # type: ignore[attr-defined]

    def test_finished_execution_is_recorded_and_later_deliveries_are_duplicates(
        self, store: Store, namespace: str
    ) -> None:
        """finish_execution records outcome and runtime; a delivery after it is a duplicate."""
        window = dispatched(store, namespace)
        start(store, namespace, window)
        runtime = timedelta(seconds=1, microseconds=500)
        finish(store, namespace, window, runtime=runtime)
        row = row_of(store, namespace, window)
        assert row.outcome is Outcome.SUCCESS  # type: ignore[attr-defined]
        assert row.runtime == runtime  # type: ignore[attr-defined]
        assert row.finished_at >= row.started_at  # type: ignore[attr-defined]
        stale = start(store, namespace, window, worker="w2@host:2", lease=timedelta(0))
        assert stale is Start.DUPLICATE  # finished runs are never taken over
        assert row_of(store, namespace, window).duplicates == 1  # type: ignore[attr-defined]

    def test_a_failed_execution_keeps_its_detail(self, store: Store, namespace: str) -> None:
        """finish_execution's detail (a command's exit status, an exception) lands in `error`."""
        window = dispatched(store, namespace)
        start(store, namespace, window)
        finish(
            store,
            namespace,
            window,
            outcome=Outcome.FAILURE,
            runtime=timedelta(seconds=2),
            detail="the command exited with 3",
        )
        row = row_of(store, namespace, window)
        assert row.outcome is Outcome.FAILURE  # type: ignore[attr-defined]
        assert row.error == "the command exited with 3"  # type: ignore[attr-defined]

    def test_a_celery_retry_of_the_window_runs(self, store: Store, namespace: str) -> None:
        """A delivery with a higher retry number runs; a redelivery of that retry does not."""
        window = dispatched(store, namespace)
        start(store, namespace, window)
        finish(store, namespace, window, outcome=Outcome.RETRY)
        assert start(store, namespace, window, worker="w2@host:2", retries=1) is Start.RUN
        assert start(store, namespace, window, worker="w1@host:1", retries=1) is Start.DEFER
        row = row_of(store, namespace, window)
        assert (row.worker, row.retries, row.runs) == ("w2@host:2", 1, 2)  # type: ignore[attr-defined]
        assert (row.outcome, row.finished_at, row.runtime) == (None, None, None)  # type: ignore[attr-defined]

    def test_a_retry_delivered_while_its_previous_attempt_lives_waits_for_its_end(
        self, store: Store, namespace: str
    ) -> None:
        """A Celery retry's message that comes before its previous attempt's end is recorded
        is deferred, and writes nothing; once that attempt ends with `retry`, it runs."""
        window = dispatched(store, namespace)
        start(store, namespace, window)
        assert start(store, namespace, window, worker="w2@host:2", retries=1) is Start.DEFER
        row = row_of(store, namespace, window)
        assert (row.worker, row.retries, row.runs) == ("w1@host:1", 0, 1)  # type: ignore[attr-defined]
        finish(store, namespace, window, outcome=Outcome.RETRY)
        assert start(store, namespace, window, worker="w2@host:2", retries=1) is Start.RUN

    @pytest.mark.parametrize("outcome", [Outcome.SUCCESS, Outcome.FAILURE])
    def test_a_late_copy_of_a_retry_never_starts_beside_or_after_the_take_over_of_its_run(
        self, store: Store, namespace: str, outcome: Outcome
    ) -> None:
        """Issue 29, hole 3. A retry's run dies; beat re-publishes the window with retries 0
        and that delivery takes the run over. A late copy of the retry's message (an acks-late
        redelivery, a deferred copy) is deferred while the take-over lives, leaves the
        take-over's lease its own, and is a duplicate once the take-over finished."""
        window = dispatched(store, namespace)
        start(store, namespace, window)
        finish(store, namespace, window, outcome=Outcome.RETRY)
        died = start(store, namespace, window, worker="w2@host:2", retries=1, lease=timedelta(0))
        assert died is Start.RUN
        assert start(store, namespace, window, worker="w3@host:3") is Start.TAKEOVER
        assert start(store, namespace, window, worker="w4@host:4", retries=1) is Start.DEFER
        takeover = LeasedRun("a", window, "w3@host:3", 0)
        assert store.renew_executions(namespace, [takeover], lease=HOUR) == 1
        finish(store, namespace, window, worker="w3@host:3", outcome=outcome)
        assert start(store, namespace, window, worker="w4@host:4", retries=1) is Start.DUPLICATE
        assert start(store, namespace, window, worker="w4@host:4", retries=2) is Start.DUPLICATE
        row = row_of(store, namespace, window)
        assert (row.worker, row.runs, row.outcome) == ("w3@host:3", 3, outcome)  # type: ignore[attr-defined]

    def test_a_take_over_that_ends_asking_for_a_retry_is_followed_by_one_attempt(
        self, store: Store, namespace: str
    ) -> None:
        """The take-over of a dead retry asks for a retry itself: the next attempt runs once,
        whether its own message or a late copy of the dead retry's comes first."""
        window = dispatched(store, namespace)
        start(store, namespace, window)
        finish(store, namespace, window, outcome=Outcome.RETRY)
        died = start(store, namespace, window, worker="w2@host:2", retries=1, lease=timedelta(0))
        assert died is Start.RUN
        assert start(store, namespace, window, worker="w3@host:3") is Start.TAKEOVER
        finish(store, namespace, window, worker="w3@host:3", outcome=Outcome.RETRY)
        assert start(store, namespace, window, worker="w4@host:4", retries=1) is Start.RUN
        assert start(store, namespace, window, worker="w5@host:5", retries=1) is Start.DEFER
        finish(store, namespace, window, worker="w4@host:4", retries=1)
        assert start(store, namespace, window, worker="w5@host:5", retries=1) is Start.DUPLICATE
        row = row_of(store, namespace, window)
        assert (row.worker, row.retries, row.runs) == ("w4@host:4", 1, 4)  # type: ignore[attr-defined]

    @pytest.mark.parametrize("outcome", [Outcome.SUCCESS, Outcome.FAILURE])
    def test_a_window_that_finished_for_good_never_runs_again_whatever_its_retries(
        self, store: Store, namespace: str, outcome: Outcome
    ) -> None:
        """After a run that ended with success or failure, a delivery with a higher retry
        number (a stale copy of an older attempt's retry) is a duplicate too."""
        window = dispatched(store, namespace)
        start(store, namespace, window)
        finish(store, namespace, window, outcome=outcome)
        for retries in (1, 3):
            verdict = start(store, namespace, window, worker="w2@host:2", retries=retries)
            assert verdict is Start.DUPLICATE
        row = row_of(store, namespace, window)
        assert (row.runs, row.duplicates, row.outcome) == (1, 2, outcome)  # type: ignore[attr-defined]

    def test_a_retry_whose_previous_attempt_died_unrecorded_takes_it_over(
        self, store: Store, namespace: str
    ) -> None:
        """An attempt that sent its retry and died before recording its end: the retry takes
        the dead run over (a lease that lapsed, not an end asking for a retry)."""
        window = dispatched(store, namespace)
        start(store, namespace, window, lease=timedelta(0))
        assert start(store, namespace, window, worker="w2@host:2", retries=1) is Start.TAKEOVER
        row = row_of(store, namespace, window)
        assert (row.worker, row.retries, row.runs) == ("w2@host:2", 1, 2)  # type: ignore[attr-defined]

    def test_an_unfinished_run_whose_lease_expired_is_taken_over(
        self, store: Store, namespace: str
    ) -> None:
        """A run that never finished and whose lease ended is taken over with a new lease,
        however young; its late finish is ignored."""
        window = dispatched(store, namespace)
        start(store, namespace, window, lease=timedelta(0))
        taken = start(store, namespace, window, worker="w2@host:2")
        assert taken is Start.TAKEOVER
        row = row_of(store, namespace, window)
        assert row.lease_until > store.clock()  # type: ignore[attr-defined]
        assert start(store, namespace, window, worker="w3@host:3") is Start.DEFER
        for worker in ("w1@host:1", "w2@host:2"):
            finish(
                store,
                namespace,
                window,
                worker=worker,
                outcome=Outcome.FAILURE if worker == "w1@host:1" else Outcome.SUCCESS,
                runtime=timedelta(seconds=2),
            )
        row = row_of(store, namespace, window)
        assert (row.worker, row.runs, row.outcome) == ("w2@host:2", 2, Outcome.SUCCESS)  # type: ignore[attr-defined]

    def test_a_window_without_a_dispatch_is_unknown(self, store: Store, namespace: str) -> None:
        """Windows never claimed, or skipped, are UNKNOWN and nothing is written for them."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        skipped = window_after(state, 3)
        skip = NewSkip("a", skipped, skipped, 1, "missed")
        store.tick(namespace, ["a"], lambda now, s: TickPlan(skips=[skip]), replica=REPLICA)
        assert start(store, namespace, window_after(state, 1)) is Start.UNKNOWN
        assert start(store, namespace, skipped) is Start.UNKNOWN
        [row] = store.history(namespace, "a")
        assert (row.started_at, row.runs, row.duplicates) == (None, 0, 0)

    def test_concurrent_deliveries_start_a_window_once(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """Deliveries of one window racing from several workers: exactly one runs."""
        stores = [open_store() for _ in range(6)]
        window = dispatched(stores[0], namespace)
        verdicts: list[Start] = []
        barrier = threading.Barrier(len(stores))

        def deliver(store: Store, index: int) -> None:
            barrier.wait(10)
            verdict = start(store, namespace, window, worker=f"w{index}@host:{index}")
            verdicts.append(verdict)

        threads = [threading.Thread(target=deliver, args=(s, i)) for i, s in enumerate(stores)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sorted(verdicts) == sorted([Start.RUN] + [Start.DEFER] * 5)
        row = row_of(stores[0], namespace, window)
        assert (row.runs, row.duplicates) == (1, 0)  # type: ignore[attr-defined]

    def test_concurrent_exclusive_starts_of_two_windows_run_one(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """Two windows of a forbid entry delivered at once on several workers: exactly one
        delivery of one window runs; every other is deferred."""
        stores = [open_store() for _ in range(6)]
        windows = [dispatched(stores[0], namespace, 1), dispatched(stores[0], namespace, 2)]
        verdicts: list[Start] = []
        barrier = threading.Barrier(len(stores))

        def deliver(store: Store, index: int) -> None:
            barrier.wait(10)
            window = windows[index % 2]
            verdicts.append(
                start(store, namespace, window, worker=f"w{index}@host:{index}", exclusive=True)
            )

        threads = [threading.Thread(target=deliver, args=(s, i)) for i, s in enumerate(stores)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sorted(verdicts) == sorted([Start.RUN] + [Start.DEFER] * 5)
        assert sum(row_of(stores[0], namespace, w).runs for w in windows) == 1  # type: ignore[attr-defined]

    def test_running_since_is_the_start_of_an_unfinished_run(
        self, store: Store, namespace: str
    ) -> None:
        """Ticks see when the entry's unfinished run started, and None once it finished."""
        window = dispatched(store, namespace)

        def running_since() -> datetime | None:
            result = store.tick(namespace, ["a"], lambda now, s: TickPlan(), replica=REPLICA)
            assert result is not None
            assert store.states(namespace)["a"].running_since == result.states["a"].running_since
            return result.states["a"].running_since

        assert running_since() is None
        start(store, namespace, window)
        started = row_of(store, namespace, window).started_at  # type: ignore[attr-defined]
        assert started is not None
        assert running_since() == started
        finish(store, namespace, window, outcome=Outcome.FAILURE)
        assert running_since() is None

    def test_a_run_whose_lease_expired_is_not_running(self, store: Store, namespace: str) -> None:
        """running_since counts only runs with a live lease: a dead run blocks no `forbid`."""
        window = dispatched(store, namespace)
        start(store, namespace, window, lease=timedelta(0))
        result = store.tick(namespace, ["a"], lambda now, s: TickPlan(), replica=REPLICA)
        assert result is not None
        assert result.states["a"].running_since is None
        assert store.states(namespace)["a"].running_since is None

    def test_renewing_extends_only_the_leases_of_runs_still_held(
        self, store: Store, namespace: str
    ) -> None:
        """renew_executions extends, in one call, the lease of each unfinished run whose worker
        and retry number match; a taken-over or finished run is left alone."""
        first = dispatched(store, namespace, 1)
        second = dispatched(store, namespace, 2)
        third = dispatched(store, namespace, 3)
        for window in (first, second, third):
            start(store, namespace, window, lease=timedelta(0))
        start(store, namespace, second, worker="w2@host:2", lease=timedelta(0))  # taken over
        finish(store, namespace, third)
        runs = [LeasedRun("a", w, "w1@host:1", 0) for w in (first, second, third)]
        assert store.renew_executions(namespace, runs, lease=HOUR) == 1
        assert store.renew_executions(namespace, [], lease=HOUR) == 0
        # The renewed run is alive again; the taken-over one still has its dead lease.
        assert start(store, namespace, first, worker="w9@host:9") is Start.DEFER
        assert start(store, namespace, second, worker="w9@host:9") is Start.TAKEOVER
        ended = store.renew_executions(namespace, [runs[0]], lease=timedelta(0))
        assert ended == 1
        assert start(store, namespace, first, worker="w9@host:9") is Start.TAKEOVER

    def test_an_exclusive_start_waits_while_another_window_of_the_entry_lives(
        self, store: Store, namespace: str
    ) -> None:
        """With exclusive (forbid), a window does not start while another window of the entry
        runs with a live lease; it starts once that run finished or its lease expired."""
        first = dispatched(store, namespace, 1)
        second = dispatched(store, namespace, 2)
        assert start(store, namespace, second) is Start.RUN
        assert start(store, namespace, first, exclusive=True) is Start.DEFER
        assert start(store, namespace, first) is Start.RUN  # without exclusive: allowed
        third = dispatched(store, namespace, 3)
        assert start(store, namespace, third, exclusive=True) is Start.DEFER
        finish(store, namespace, second)
        store.renew_executions(
            namespace, [LeasedRun("a", first, "w1@host:1", 0)], lease=timedelta(0)
        )
        assert start(store, namespace, third, exclusive=True) is Start.RUN
        assert row_of(store, namespace, third).runs == 1  # type: ignore[attr-defined]

    def test_queued_since_is_the_claim_of_a_newest_window_no_worker_started(
        self, store: Store, namespace: str
    ) -> None:
        """Ticks and states see when the entry's newest dispatched window was claimed while no
        worker has started it; a start clears it, newer skips do not hide it, a failed publish
        does not count, and a newer claim is queued again."""
        window = dispatched(store, namespace)

        def queued_since() -> datetime | None:
            result = store.tick(namespace, ["a"], lambda now, s: TickPlan(), replica=REPLICA)
            assert result is not None
            assert store.states(namespace)["a"].queued_since == result.states["a"].queued_since
            return result.states["a"].queued_since

        claimed = row_of(store, namespace, window).claimed_at  # type: ignore[attr-defined]
        assert queued_since() == claimed
        [row_id] = [r.id for r in store.history(namespace, "a")]
        store.record_publish(namespace, [row_id], {})
        assert queued_since() == claimed
        skip = NewSkip("a", window + SECOND, window + SECOND, 1, "overlap")
        store.tick(namespace, ["a"], lambda now, s: TickPlan(skips=[skip]), replica=REPLICA)
        assert queued_since() == claimed
        start(store, namespace, window)
        assert queued_since() is None
        later = window + 3 * SECOND
        store.tick(
            namespace, ["a"], lambda now, s: claim_plan("a", namespace, later), replica=REPLICA
        )
        [newer] = [r for r in store.history(namespace, "a") if r.window == later]
        assert queued_since() == newer.claimed_at
        store.record_publish(namespace, [], {newer.id: "unroutable"})
        assert queued_since() is None

    def test_queued_since_is_found_past_any_number_of_newer_skips(
        self, store: Store, namespace: str
    ) -> None:
        """The newest dispatched window is found however many skipped windows came after it
        (a paused or `forbid` entry records one per window): 150 of them here."""
        window = dispatched(store, namespace)
        claimed = row_of(store, namespace, window).claimed_at  # type: ignore[attr-defined]
        skips = [
            NewSkip("a", window + n * SECOND, window + n * SECOND, 1, "paused")
            for n in range(1, 151)
        ]
        store.tick(namespace, ["a"], lambda now, s: TickPlan(skips=skips), replica=REPLICA)
        result = store.tick(namespace, ["a"], lambda now, s: TickPlan(), replica=REPLICA)
        assert result is not None
        assert result.states["a"].queued_since == claimed
        assert store.states(namespace)["a"].queued_since == claimed

    def test_an_effect_key_is_claimed_once_until_released(
        self, store: Store, namespace: str
    ) -> None:
        """A key is claimed once; only its owner releases it, and then it can be claimed again."""
        assert claim_key(store, namespace, "owner-1") is True
        assert claim_key(store, namespace, "owner-2") is False
        assert (
            store.release_effect(namespace, '["report",17,"2026-03-02"]', owner="owner-2") is False
        )
        assert claim_key(store, namespace, "owner-2") is False
        assert (
            store.release_effect(namespace, '["report",17,"2026-03-02"]', owner="owner-1") is True
        )
        assert claim_key(store, namespace, "owner-2") is True
        assert claim_key(store, namespace + "-other", "owner-3") is True  # namespaces are apart

    def test_an_expired_effect_key_can_be_claimed_again(self, store: Store, namespace: str) -> None:
        """After keep_for, a key is free again, and its first owner can no longer release it."""
        assert claim_key(store, namespace, "owner-1", keep_for=timedelta(milliseconds=50))
        time.sleep(0.1)
        assert claim_key(store, namespace, "owner-2") is True
        assert (
            store.release_effect(namespace, '["report",17,"2026-03-02"]', owner="owner-1") is False
        )
        assert claim_key(store, namespace, "owner-3") is False

    def test_concurrent_effect_claims_have_one_winner(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """Claims of one key racing from several store instances: exactly one wins."""
        stores = [open_store() for _ in range(6)]
        wins: list[bool] = []
        barrier = threading.Barrier(len(stores))

        def contend(store: Store, index: int) -> None:
            barrier.wait(10)
            wins.append(claim_key(store, namespace, f"owner-{index}"))

        threads = [threading.Thread(target=contend, args=(s, i)) for i, s in enumerate(stores)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sorted(wins) == [False] * 5 + [True]

    def test_prune_deletes_expired_effect_keys_only(self, store: Store, namespace: str) -> None:
        """Prune deletes effect keys past their expiry and keeps live ones claimed."""
        store.claim_effect(
            namespace, "old", owner="o", keep_for=timedelta(milliseconds=50), task_id=None
        )
        store.claim_effect(namespace, "live", owner="o", keep_for=HOUR, task_id=None)
        time.sleep(0.1)
        assert store.prune(namespace, store.clock() - HOUR) == 1
        assert (
            store.claim_effect(namespace, "live", owner="p", keep_for=HOUR, task_id=None) is False
        )

    def test_a_pause_is_seen_by_every_replica_and_outlives_registration(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """set_paused flags the entry for all replicas; registering again keeps the flag."""
        store, other = open_store(), open_store()
        store.register(namespace, definitions("a", "b"), REPLICA)
        assert store.set_paused(namespace, "a", Pause(True))
        assert other.states(namespace)["a"].paused
        assert not other.states(namespace)["b"].paused
        seen: dict[str, bool] = {}

        def planner(now: datetime, states: Mapping[str, EntryState]) -> TickPlan:
            seen.update({name: state.paused for name, state in states.items()})
            return TickPlan()

        other.tick(namespace, ["a", "b"], planner, replica=OTHER)
        assert seen == {"a": True, "b": False}
        again = registered(
            other, namespace, definitions("a", schedule="every 2s", digest="d2"), OTHER
        )
        assert again["a"].paused
        assert other.set_paused(namespace, "a", Pause(False))
        assert not store.states(namespace)["a"].paused
        assert not store.set_paused(namespace, "no-such-entry", Pause(True))

    def test_the_state_of_one_entry_is_what_states_gives_for_it(
        self, store: Store, namespace: str
    ) -> None:
        """state() reads one entry: its pause, running and queued columns as states() has
        them; None for a name that is not registered."""
        window = dispatched(store, namespace)
        store.register(namespace, definitions("a", "b"), REPLICA)
        assert store.set_paused(namespace, "b", Pause(True, note="one entry"))
        start(store, namespace, window)
        every = store.states(namespace)
        assert store.state(namespace, "a") == every["a"]
        assert store.state(namespace, "b") == every["b"]
        assert every["a"].running_since is not None
        assert every["b"].paused
        assert store.state(namespace, "no-such-entry") is None
        assert store.state(f"{namespace}-other", "a") is None

    def test_a_pause_with_an_end_and_a_note_is_seen_by_every_replica_and_cleared_by_resume(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """set_paused keeps a pause's end and note for every replica's states, register and tick
        loads; a restart keeps them; resuming clears them (a resume's note is not stored)."""
        store, other = open_store(), open_store()
        store.register(namespace, definitions("a", "b"), REPLICA)
        until = datetime(2031, 5, 4, 3, 2, 1, 123456, tzinfo=timezone.utc)
        assert store.set_paused(
            namespace, "a", Pause(True, until=until, note="migrating the mailer")
        )
        state = other.states(namespace)["a"]
        assert (state.paused, state.paused_until, state.pause_note) == (
            True,
            until,
            "migrating the mailer",
        )
        seen: dict[str, tuple[datetime | None, str | None]] = {}

        def planner(now: datetime, states: Mapping[str, EntryState]) -> TickPlan:
            seen.update({n: (s.paused_until, s.pause_note) for n, s in states.items()})
            return TickPlan()

        other.tick(namespace, ["a", "b"], planner, replica=OTHER)
        assert seen == {"a": (until, "migrating the mailer"), "b": (None, None)}
        again = registered(
            other, namespace, definitions("a", schedule="every 2s", digest="d2"), OTHER
        )
        assert again["a"].paused_until == until
        assert store.set_paused(namespace, "a", Pause(False, until=until, note="mailer moved"))
        resumed = other.states(namespace)["a"]
        assert (resumed.paused, resumed.paused_until, resumed.pause_note) == (False, None, None)

    def test_a_pause_whose_end_passed_is_over_at_the_store_clock(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """A pause whose end is before the store's now reads as not paused at that now, and one
        whose end is later as paused, with no write in between."""
        store = open_store()
        store.register(namespace, definitions("a", "b"), REPLICA)
        now = store.clock()
        store.set_paused(namespace, "a", Pause(True, until=now - SECOND))
        store.set_paused(namespace, "b", Pause(True, until=now + HOUR))
        states = store.states(namespace)
        later = store.clock()
        assert not states["a"].paused_at(later)
        assert states["b"].paused_at(later)

    def test_the_audit_trail_records_actions_at_store_time_newest_first(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """record_audit stamps each action with the store clock; audit lists them newest first,
        with every field as recorded, for every replica, filtered by entry and limited."""
        store, other = open_store(), open_store()
        window = datetime(2026, 3, 1, 6, 0, 0, 250000, tzinfo=timezone.utc)
        before = store.clock()
        first = store.record_audit(
            namespace, AuditEvent("alice@ops-1", AuditAction.PAUSE, "report", (), "bad data")
        )
        second = store.record_audit(
            namespace,
            AuditEvent("bob", AuditAction.BACKFILL, "invoices", (window, window + HOUR), None),
        )
        third = store.record_audit(namespace, AuditEvent("carol", AuditAction.MIGRATE))
        assert before <= first.at <= second.at <= third.at <= store.clock()
        assert first.id < second.id < third.id
        assert other.audit(namespace) == [third, second, first]
        assert other.audit(namespace, "invoices") == [second]
        assert second.windows == (window, window + HOUR)
        assert (first.actor, first.action, first.entry, first.note) == (
            "alice@ops-1",
            AuditAction.PAUSE,
            "report",
            "bad data",
        )
        assert (third.entry, third.windows, third.note) == (None, (), None)
        assert other.audit(namespace, limit=2) == [third, second]
        assert other.audit(namespace + "-other") == []

    def test_prune_deletes_audit_records_made_before_the_cutoff(
        self, store: Store, namespace: str
    ) -> None:
        """Prune drops audit records older than its cutoff (safebeat_retention) and keeps newer
        ones, without counting them among the rows it reports."""
        old = store.record_audit(namespace, AuditEvent("a", AuditAction.TRIGGER, "x"))
        assert store.prune(namespace, old.at) == 0
        assert store.audit(namespace) == [old]
        cutoff = old.at + timedelta(microseconds=1)
        while store.clock() <= cutoff:  # the next record is made after the cutoff
            pass
        newer = store.record_audit(namespace, AuditEvent("b", AuditAction.RESUME, "x"))
        assert store.prune(namespace, cutoff) == 0
        assert store.audit(namespace) == [newer]
        assert store.audit(namespace, "x") == [newer]

    def test_forgetting_an_entry_drops_its_state_keeps_its_history_and_others(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """forget_entry removes one entry's state for every replica; its dispatch rows stay, so
        its decided windows are never claimed again; registering it again starts it anew."""
        store, other = open_store(), open_store()
        state = registered(store, namespace, definitions("a", "b"), REPLICA)["a"]
        window = window_after(state, 1)
        store.tick(
            namespace, ["a"], lambda now, s: claim_plan("a", namespace, window), replica=REPLICA
        )
        store.set_paused(namespace, "a", Pause(True))
        assert other.forget_entry(namespace, "a")
        assert sorted(store.states(namespace)) == ["b"]
        assert [r.window for r in store.history(namespace, "a")] == [window]
        assert not store.forget_entry(namespace, "a")
        assert not store.forget_entry(namespace, "no-such-entry")
        again = registered(store, namespace, definitions("a", digest="d2"), REPLICA)["a"]
        assert not again.paused
        assert again.digest == "d2"
        assert again.last_window is None
        repeat = store.claim_extra(
            namespace,
            [NewClaim("a", window, task_id_for(namespace, "a", window), "t")],
            replica=REPLICA,
            reason="trigger",
        )
        assert repeat == []

    def test_extra_claims_share_the_unique_key_and_leave_last_window_alone(
        self, store: Store, namespace: str
    ) -> None:
        """claim_extra inserts only windows without a row, records why, and moves no state."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        first, second = window_after(state, 1), window_after(state, 2)
        store.tick(
            namespace, ["a"], lambda now, s: claim_plan("a", namespace, first), replica=REPLICA
        )
        extra = store.claim_extra(
            namespace,
            [
                NewClaim("a", w, task_id_for(namespace, "a", w), "tasks.run")
                for w in (first, second)
            ],
            replica=OTHER,
            reason="backfill",
        )
        assert [(c.window, c.attempts) for c in extra] == [(second, 1)]
        assert extra[0].task_id == task_id_for(namespace, "a", second)
        assert store.states(namespace)["a"].last_window == first
        row = next(r for r in store.history(namespace, "a") if r.window == second)
        assert (row.status, row.reason, row.replica) == (Status.CLAIMED, "backfill", OTHER.id)
        store.record_publish(namespace, [extra[0].id], {})
        row = next(r for r in store.history(namespace, "a") if r.window == second)
        assert row.status is Status.SENT
        assert store.claim_extra(namespace, [], replica=OTHER, reason="trigger") == []

    def test_extra_claims_left_unsent_are_taken_over_by_a_tick(
        self, store: Store, namespace: str
    ) -> None:
        """A triggered claim nobody published is re-published by the next reclaim, same task id."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        window = window_after(state, 1) + timedelta(microseconds=250)
        [claim] = store.claim_extra(
            namespace,
            [NewClaim("a", window, task_id_for(namespace, "a", window), "tasks.run")],
            replica=OTHER,
            reason="trigger",
        )
        result = store.tick(
            namespace,
            [],
            lambda now, s: TickPlan(),
            replica=REPLICA,
            reclaim=Reclaim(["a"], timedelta(0)),
        )
        assert result is not None
        assert [(c.id, c.window, c.task_id, c.attempts) for c in result.reclaimed] == [
            (claim.id, window, claim.task_id, 2)
        ]

    def test_effect_keys_differing_by_case_accent_or_trailing_space_are_distinct(
        self, store: Store, namespace: str
    ) -> None:
        """Effect keys are compared byte for byte: each lookalike is a key of its own, held once."""
        keys = [f'["charge","{value}"]' for value in LOOKALIKES]
        owners = [f"owner-{index}" for index in range(len(keys))]
        first = [
            store.claim_effect(namespace, key, owner=owner, keep_for=HOUR, task_id=None)
            for key, owner in zip(keys, owners, strict=True)
        ]
        again = [
            store.claim_effect(namespace, key, owner="late", keep_for=HOUR, task_id=None)
            for key in keys
        ]
        assert first == [True] * len(keys)
        assert again == [False] * len(keys)
        released = [
            store.release_effect(namespace, key, owner=owner)
            for key, owner in zip(keys, owners, strict=True)
        ]
        assert released == [True] * len(keys)

    def test_entry_names_differing_by_case_accent_or_trailing_space_are_distinct(
        self, store: Store, namespace: str
    ) -> None:
        """Entry names and namespaces are compared byte for byte: lookalikes each keep their own
        state, stay registered, and each gets its own window claimed."""
        registration = registered(store, namespace, definitions(*LOOKALIKES), REPLICA)
        assert sorted(registration) == sorted(LOOKALIKES)
        again = store.register(namespace, definitions(*LOOKALIKES), OTHER)
        assert again.changed == {}
        assert sorted(store.states(namespace)) == sorted(LOOKALIKES)
        anchor = registration[LOOKALIKES[0]].anchor
        window = anchor + SECOND
        claims = [NewClaim(n, window, task_id_for(namespace, n, window), "t") for n in LOOKALIKES]
        plan = TickPlan(claims=claims, advances=dict.fromkeys(LOOKALIKES, window))
        result = store.tick(namespace, list(LOOKALIKES), lambda now, states: plan, replica=REPLICA)
        assert result is not None
        assert sorted(claim.entry for claim in result.claimed) == sorted(LOOKALIKES)
        states = store.states(namespace)
        assert {name: states[name].last_window for name in LOOKALIKES} == dict.fromkeys(
            LOOKALIKES, window
        )
        # Two namespaces differing only in case, both carrying the run's tag as it is (so the
        # end-of-run sweep finds their Redis keys; `namespace.upper()` would hide them).
        lower, upper = f"{namespace}-case", f"{namespace}-CASE"
        assert sorted(registered(store, lower, definitions("nightly"), REPLICA)) == ["nightly"]
        assert sorted(registered(store, upper, definitions("Nightly"), REPLICA)) == ["Nightly"]
        assert sorted(store.states(lower)) == ["nightly"]
        assert sorted(store.states(namespace)) == sorted(LOOKALIKES)

    @pytest.mark.parametrize("policy", sorted(FENCE_POLICIES))
    def test_a_frozen_planner_writes_nothing_decided_while_it_was_frozen(
        self,
        open_store: StoreFactory,
        namespace: str,
        tick_lock_taken_back: bool,
        policy: str,
    ) -> None:
        """A replica frozen inside its planner while another replica ticks writes, when it
        resumes, no claim or skip at or before what the other decided meanwhile (misfire
        skip, a grace, overlap forbid), and no window ends both skipped and claimed."""
        frozen_store, live_store = open_store(), open_store()
        entry = fence_entry(policy)
        frozen_store.register(namespace, [entry.definition], REPLICA)
        planner = real_planner(entry, namespace)
        planned, resume = threading.Event(), threading.Event()
        outcome: list[object] = []

        def frozen(now: datetime, states: Mapping[str, EntryState]) -> TickPlan:
            plan = planner(now, states)
            planned.set()
            resume.wait(30)  # frozen (a GC pause, SIGSTOP) until the other replica has ticked
            return plan

        def frozen_replica() -> None:
            time.sleep(0.5)  # windows pass, so the frozen plan has some to write
            try:
                outcome.append(frozen_store.tick(namespace, ["e"], frozen, replica=REPLICA))
            except Exception as exc:  # noqa: BLE001 - a lost session is one way to write nothing
                outcome.append(exc)

        thread = threading.Thread(target=frozen_replica)
        thread.start()
        assert planned.wait(30)
        decided: datetime | None = None
        deadline = time.monotonic() + 8  # lock timeout 2 s in these stores
        while tick_lock_taken_back and decided is None and time.monotonic() < deadline:
            result = live_store.tick(namespace, ["e"], planner, replica=OTHER)
            if result is None or result.states["e"].last_window is None:
                time.sleep(0.05)  # the lock is still the frozen replica's
                continue
            decided = result.states["e"].last_window
            for claim in result.claimed:  # the live replica's runs start: forbid sees them
                live_store.start_execution(
                    namespace, LeasedRun("e", claim.window, "w1@host:1", 0), lease=HOUR
                )
        resume.set()
        thread.join(30)
        assert outcome, "the frozen replica's tick never returned"
        rows = live_store.history(namespace, "e", limit=10_000)
        if tick_lock_taken_back:
            assert decided is not None, "the other replica never ticked while one was frozen"
            written = [r.window for r in rows if r.replica == REPLICA.id]
            assert [w for w in written if w <= decided] == []
        skipped = [
            (r.skipped_from or r.window, r.window) for r in rows if r.status is Status.SKIPPED
        ]
        for row in rows:
            if row.task_id is not None:
                assert not any(first <= row.window <= last for first, last in skipped), row

    def test_a_plan_is_fenced_by_the_last_window_stored_at_write_time(
        self, store: Store, namespace: str
    ) -> None:
        """A claim or skip at or before the entry's last window as stored when the tick writes
        is not written, whatever the planner saw: the rest of the plan is."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        store.tick(
            namespace,
            ["a"],
            lambda now, s: TickPlan(
                skips=[NewSkip("a", window_after(state, 5), window_after(state, 1), 5, "missed")],
                advances={"a": window_after(state, 5)},
            ),
            replica=OTHER,
        )
        stale = claim_plan("a", namespace, window_after(state, 3), window_after(state, 6))
        stale = TickPlan(
            claims=stale.claims,
            skips=[NewSkip("a", window_after(state, 4), window_after(state, 4), 1, "missed")],
            advances=stale.advances,
        )
        result = store.tick(namespace, ["a"], lambda now, s: stale, replica=REPLICA)
        assert result is not None
        assert [c.window for c in result.claimed] == [window_after(state, 6)]
        rows = sorted(store.history(namespace, "a"), key=lambda r: r.window)
        assert [(r.window, r.status) for r in rows] == [
            (window_after(state, 5), Status.SKIPPED),
            (window_after(state, 6), Status.CLAIMED),
        ]

    def test_runtime_entries_are_added_replaced_and_deleted_for_every_replica(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """An entry added at run time is seen by every replica; adding a name twice, replacing or
        deleting a name never added is refused; each change moves the version, reads do not."""
        store, other = open_store(), open_store()
        assert store.runtime_version(namespace) == 0
        assert store.runtime_entries(namespace) == {}
        assert store.save_runtime_entry(namespace, "a", '{"v": 1}', replace=False)
        assert not other.save_runtime_entry(namespace, "a", '{"v": 2}', replace=False)
        assert not other.save_runtime_entry(namespace, "b", '{"v": 2}', replace=True)
        assert other.runtime_entries(namespace) == {"a": '{"v": 1}'}
        assert other.runtime_version(namespace) == 1
        assert other.save_runtime_entry(namespace, "a", '{"v": 3}', replace=True)
        assert store.save_runtime_entry(namespace, "b", '{"v": 4}', replace=False)
        assert store.runtime_entries(namespace) == {"a": '{"v": 3}', "b": '{"v": 4}'}
        assert store.runtime_version(namespace) == 3
        assert other.delete_runtime_entry(namespace, "a")
        assert not store.delete_runtime_entry(namespace, "a")
        assert store.runtime_entries(namespace) == {"b": '{"v": 4}'}
        assert store.runtime_version(namespace) == 4
        assert store.runtime_version(f"{namespace}-other") == 0
        assert store.runtime_entries(f"{namespace}-other") == {}

    def test_runtime_entries_leave_entry_state_and_history_alone(
        self, store: Store, namespace: str
    ) -> None:
        """Deleting an entry added at run time keeps its registered state and its dispatch rows,
        so a window it decided is never claimed again if it is added back."""
        store.save_runtime_entry(namespace, "a", "{}", replace=False)
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        window = window_after(state, 1)
        store.tick(
            namespace, ["a"], lambda now, s: claim_plan("a", namespace, window), replica=REPLICA
        )
        assert store.delete_runtime_entry(namespace, "a")
        assert "a" in store.states(namespace)
        assert [r.window for r in store.history(namespace, "a")] == [window]

    def test_concurrent_adds_of_one_runtime_entry_have_one_winner(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """Of several replicas adding the same name at once, exactly one stores it."""
        stores = [open_store() for _ in range(4)]
        results: list[bool] = []
        barrier = threading.Barrier(len(stores))

        def add(store: Store, index: int) -> None:
            barrier.wait(10)
            results.append(store.save_runtime_entry(namespace, "x", f"{index}", replace=False))

        threads = [threading.Thread(target=add, args=(s, i)) for i, s in enumerate(stores)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sorted(results) == [False, False, False, True]
        assert stores[0].runtime_version(namespace) == 1

    def test_claims_handed_back_are_taken_over_by_the_next_tick_of_any_replica(
        self, store: Store, namespace: str
    ) -> None:
        """A claim its replica hands back is stale at once for the take-over rule: the next tick
        of another replica takes it over with the same task id, counting the attempt; the
        claims not handed back still wait the timeout."""
        first, _still_waiting = claimed(store, namespace, "a", 1, 2)
        assert store.release_claims(namespace, [first], replica=REPLICA, timeout=HOUR) == 1
        [row] = [r for r in store.history(namespace, "a") if r.window == first.window]
        assert row.status is Status.CLAIMED
        assert row.claimed_at < store.clock() - HOUR
        [taken] = take_over(store, namespace, OTHER, HOUR)
        assert (taken.id, taken.window, taken.task_id) == (first.id, first.window, first.task_id)
        assert taken.attempts == 2
        assert take_over(store, namespace, REPLICA, HOUR) == []  # fresh again after the take-over

    def test_only_the_claimers_own_unsent_claims_are_handed_back(
        self, store: Store, namespace: str
    ) -> None:
        """Release is fenced: a claim recorded sent or failed, another replica's claim, and a claim
        taken over since (by anyone: its attempt moved on) are left as they are."""
        sent, failed, taken, kept = claimed(store, namespace, "a", 1, 2, 3, 4)
        store.record_publish(namespace, [sent.id], {failed.id: "EncodeError: bad kwargs"})
        assert store.release_claims(namespace, [sent, failed], replica=REPLICA, timeout=HOUR) == 0
        assert store.release_claims(namespace, [taken, kept], replica=OTHER, timeout=HOUR) == 0
        retaken = take_over(store, namespace, REPLICA, timedelta(0))
        assert [c.window for c in retaken] == [taken.window, kept.window]
        # REPLICA's first attempt of them is over: handing that attempt back changes nothing.
        assert store.release_claims(namespace, [taken, kept], replica=REPLICA, timeout=HOUR) == 0
        assert take_over(store, namespace, OTHER, HOUR) == []
        assert store.release_claims(namespace, retaken[1:], replica=REPLICA, timeout=HOUR) == 1
        [again] = take_over(store, namespace, OTHER, HOUR)
        assert (again.window, again.attempts) == (kept.window, 3)
        rows = {r.window: r.status for r in store.history(namespace, "a")}
        assert rows[sent.window] is Status.SENT
        assert rows[failed.window] is Status.FAILED
