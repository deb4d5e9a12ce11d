"""Starting and finishing executions: deliveries, duplicates, retries and takeovers."""

from __future__ import annotations

from datetime import timedelta

import pytest

from safebeat.stores.protocols import LeasedRun, NewSkip, Outcome, Start, Status, Store, TickPlan
from safebeat.testing.stores.support import (
    HOUR,
    REPLICA,
    StoreFactory,
    definitions,
    dispatched,
    finish,
    race,
    registered,
    retry_taken_over,
    row_of,
    start,
    window_after,
)


class ExecutionCases:
    """The contract's cases on starting and finishing executions; `StoreContract` runs them."""

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
        window = retry_taken_over(store, namespace)
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
        window = retry_taken_over(store, namespace)
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
        verdicts = race(
            stores, lambda store, i: start(store, namespace, window, worker=f"w{i}@host:{i}")
        )
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

        def deliver(store: Store, index: int) -> Start:
            window = windows[index % 2]
            return start(store, namespace, window, worker=f"w{index}@host:{index}", exclusive=True)

        verdicts = race(stores, deliver)
        assert sorted(verdicts) == sorted([Start.RUN] + [Start.DEFER] * 5)
        assert sum(row_of(stores[0], namespace, w).runs for w in windows) == 1  # type: ignore[attr-defined]
