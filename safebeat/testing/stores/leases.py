"""Leases of running executions: running since, renewing, exclusive starts, queued since, and
the facts the overlap rules read (the live run, the newest dispatched window)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from safebeat.facts import Dispatched, LiveRun
from safebeat.identity import task_id_for
from safebeat.stores.protocols import (
    EntryState,
    LeasedRun,
    NewSkip,
    Outcome,
    Start,
    Store,
    TickPlan,
)
from safebeat.testing.stores.support import (
    HOUR,
    REPLICA,
    SECOND,
    claim_plan,
    dispatched,
    finish,
    row_of,
    start,
    tick_and_read,
)


class LeaseCases:
    """The contract's cases on leases of running executions; `StoreContract` runs them."""

    def test_running_since_is_the_start_of_an_unfinished_run(
        self, store: Store, namespace: str
    ) -> None:
        """Ticks see when the entry's unfinished run started, and None once it finished."""
        window = dispatched(store, namespace)

        def running_since() -> datetime | None:
            ticked, read = tick_and_read(store, namespace)
            assert read.running_since == ticked.running_since
            return ticked.running_since

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
            ticked, read = tick_and_read(store, namespace)
            assert read.queued_since == ticked.queued_since
            return ticked.queued_since

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

    def test_states_carry_the_live_run_and_the_newest_dispatched_window_as_read(
        self, store: Store, namespace: str
    ) -> None:
        """Ticks and states give, as the rows hold them, the entry's newest run holding a live
        lease (its window, start, lease end and task id) and its newest dispatched window
        (its window, claim time and start): what every overlap rule reads, so that a new
        policy needs no store change."""
        first = dispatched(store, namespace, 1)
        second = dispatched(store, namespace, 2)

        def read() -> EntryState:
            result = store.tick(namespace, ["a"], lambda now, s: TickPlan(), replica=REPLICA)
            assert result is not None
            state, stored = result.states["a"], store.states(namespace)["a"]
            assert (stored.live_run, stored.newest_dispatched) == (
                state.live_run,
                state.newest_dispatched,
            )
            return state

        def row(window: datetime) -> Any:
            return row_of(store, namespace, window)

        state = read()
        assert state.live_run is None
        assert state.newest_dispatched == Dispatched(second, row(second).claimed_at)
        start(store, namespace, first)
        state = read()
        task = task_id_for(namespace, "a", first)
        assert state.live_run == LiveRun(first, row(first).started_at, row(first).lease_until, task)
        assert state.newest_dispatched == Dispatched(second, row(second).claimed_at)
        start(store, namespace, second, worker="w2@host:2")
        state = read()
        assert state.newest_dispatched == Dispatched(
            second, row(second).claimed_at, row(second).started_at
        )
        assert state.live_run is not None
        assert state.live_run.window == second
        assert state.live_run.task_id == task_id_for(namespace, "a", second)
        finish(store, namespace, second, worker="w2@host:2")
        finish(store, namespace, first)
        assert read().live_run is None
