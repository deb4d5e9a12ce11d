"""What publishing records, and dead runs of sent windows handed back to beat."""

from __future__ import annotations

from datetime import datetime, timedelta

from safebeat.identity import task_id_for
from safebeat.stores.protocols import Claim, LeasedRun, Start, Status, Store
from safebeat.testing.stores.support import (
    HOUR,
    OTHER,
    REPLICA,
    claim_plan,
    definitions,
    finish,
    registered,
    row_of,
    start,
    take_over,
    window_after,
)


class PublishCases:
    """The contract's cases on publish outcomes and dead runs; `StoreContract` runs them."""

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
        assert take_over(store, namespace, OTHER, timedelta(0)) == []

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
            return take_over(store, namespace, OTHER, HOUR)

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
            return [claim.window for claim in take_over(store, namespace, OTHER, timedelta(0))]

        assert reclaimed() == [never]
        row = row_of(store, namespace, live)
        assert (row.status, row.attempts) == (Status.CLAIMED, 1)  # type: ignore[attr-defined]
        assert row.lease_until is not None  # type: ignore[attr-defined]
        assert start(store, namespace, live, worker="w2@host:2") is Start.DEFER
        store.renew_executions(
            namespace, [LeasedRun("a", live, "w1@host:1", 0)], lease=timedelta(0)
        )
        assert live in reclaimed()  # its lease lapsed: the run is dead
