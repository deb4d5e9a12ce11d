"""Claiming windows in a tick: each window once, skips, the last window, namespaces."""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone

import pytest

from safebeat.facts import WindowRow
from safebeat.identity import Replica, task_id_for
from safebeat.stores.protocols import EntryState, NewClaim, NewSkip, Status, Store, TickPlan
from safebeat.testing.stores.support import (
    LOOKALIKES,
    OTHER,
    REPLICA,
    StoreFactory,
    claim_plan,
    definitions,
    race,
    registered,
    returning,
    window_after,
)


class ClaimCases:
    """The contract's cases on claiming windows; `StoreContract` runs them."""

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

        def replica(store: Store, index: int) -> list[datetime]:
            who = Replica(f"h{index}", index, "t")
            claimed: list[datetime] = []
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
                claimed.extend(c.window for c in result.claimed)
            return claimed

        claims = race(stores, replica, timeout=120)
        assert sorted(w for claimed in claims for w in claimed) == windows

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

    def test_windows_written_by_hand_are_claimed_or_skipped_with_their_reason(
        self, store: Store, namespace: str
    ) -> None:
        """write_windows inserts, under the tick's unique key, a claimed row per window with a
        task id and a skipped row (a span of its one window) per window without, each with
        its reason; a window with a row, or taken by an earlier row of the call, is left
        alone and not returned. No state moves, and a skipped row is not dispatched."""
        state = registered(store, namespace, definitions("a"), REPLICA)["a"]
        first, second, third = (window_after(state, n) for n in (1, 2, 3))
        store.tick(
            namespace, ["a"], lambda now, s: claim_plan("a", namespace, first), replica=REPLICA
        )
        task = task_id_for(namespace, "a", third)
        rows = [
            WindowRow("a", first, "trigger", task_id_for(namespace, "a", first), "tasks.run"),
            WindowRow("a", second, "skipped by hand"),
            WindowRow("a", third, "backfill", task, "tasks.run"),
            WindowRow("a", third, "trigger", "another", "tasks.run"),
        ]
        written = store.write_windows(namespace, rows, replica=OTHER)
        assert [w.row for w in written] == [rows[1], rows[2]]
        assert len({w.id for w in written}) == 2
        history = {r.window: r for r in store.history(namespace, "a")}
        skipped, claimed = history[second], history[third]
        assert (skipped.id, skipped.status, skipped.reason) == (
            written[0].id,
            Status.SKIPPED,
            "skipped by hand",
        )
        assert (skipped.skipped_from, skipped.skipped_count, skipped.task_id) == (second, 1, None)
        assert (claimed.id, claimed.status, claimed.reason, claimed.task_id) == (
            written[1].id,
            Status.CLAIMED,
            "backfill",
            task,
        )
        assert claimed.replica == OTHER.id
        assert history[first].reason is None  # the tick's row, untouched
        after = store.states(namespace)["a"]
        assert after.last_window == first
        assert after.newest_dispatched is not None
        assert after.newest_dispatched.window == third
        assert store.write_windows(namespace, [], replica=OTHER) == []

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
        window = window_after(registration[LOOKALIKES[0]], 1)
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

    def test_a_skipped_span_over_a_window_skipped_by_hand_is_recorded(
        self, store: Store, namespace: str
    ) -> None:
        """A tick's skipped span whose newest window already has a row (an operator's
        `skip-next` row for a window that passed while no beat ran) commits: the hand's row
        stays as it is, the tick's other rows are written and its states advance."""
        state = registered(store, namespace, definitions("a", "b"), REPLICA)
        a, b = state["a"], state["b"]
        newest, inside = window_after(a, 3), window_after(b, 2)
        hand = [WindowRow("a", newest, "operator"), WindowRow("b", inside, "operator")]
        assert len(store.write_windows(namespace, hand, replica=OTHER)) == 2
        skips = [
            NewSkip("a", newest, window_after(a, 1), 3, "missed"),
            NewSkip("b", window_after(b, 3), window_after(b, 1), 3, "missed"),
        ]
        later = window_after(a, 4)
        plan = TickPlan(
            claims=[NewClaim("a", later, task_id_for(namespace, "a", later), "tasks.run")],
            skips=skips,
            advances={"a": later, "b": window_after(b, 3)},
        )
        result = store.tick(namespace, ["a", "b"], returning(plan), replica=REPLICA)
        assert result is not None
        assert [c.window for c in result.claimed] == [later]
        states = store.states(namespace)
        assert (states["a"].last_window, states["b"].last_window) == (later, window_after(b, 3))
        rows = {(r.entry, r.window): r for n in "ab" for r in store.history(namespace, n)}
        assert rows["a", newest].reason == "operator"
        assert rows["b", inside].reason == "operator"
        assert rows["b", window_after(b, 3)].reason == "missed"
