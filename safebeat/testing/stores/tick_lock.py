"""The tick lock: a busy lock, namespaces apart, and plans fenced against a frozen planner."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from datetime import datetime

import pytest

from safebeat.stores.protocols import EntryState, LeasedRun, NewSkip, Status, Store, TickPlan
from safebeat.testing.stores.support import (
    FENCE_POLICIES,
    HOUR,
    OTHER,
    REPLICA,
    StoreFactory,
    claim_plan,
    definitions,
    fence_entry,
    real_planner,
    registered,
    tick_lock_held,
    window_after,
)


class TickLockCases:
    """The contract's cases on the tick lock and fencing; `StoreContract` runs them."""

    def test_busy_tick_lock_returns_none(self, open_store: StoreFactory, namespace: str) -> None:
        """While one replica is inside its tick, another replica's tick reports the lock busy."""
        holder, other = open_store(), open_store()
        holder.register(namespace, definitions("a"), REPLICA)
        with tick_lock_held(holder, namespace, ["a"]):
            busy = other.tick(namespace, ["a"], lambda now, s: TickPlan(), replica=OTHER)
            assert busy is None
        after = other.tick(namespace, ["a"], lambda now, s: TickPlan(), replica=OTHER)
        assert after is not None

    def test_other_namespaces_do_not_share_the_tick_lock(
        self, open_store: StoreFactory, namespace: str, namespaces_share_tick_lock: bool
    ) -> None:
        """Two apps in one store (different namespaces) never wait for each other's lock."""
        holder, other = open_store(), open_store()
        if namespaces_share_tick_lock:
            pytest.skip("SQLite has one write lock per file: namespaces share it by design")
        with tick_lock_held(holder, namespace, []):
            result = other.tick(namespace + "-other", [], lambda now, s: TickPlan(), replica=OTHER)
            assert result is not None

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
