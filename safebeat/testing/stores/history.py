"""The dispatch history and pruning it."""

from __future__ import annotations

from datetime import timedelta

from safebeat.stores.protocols import Status, Store
from safebeat.testing.stores.support import (
    REPLICA,
    claim_plan,
    definitions,
    registered,
    returning,
    window_after,
)


class HistoryCases:
    """The contract's cases on history and pruning; `StoreContract` runs them."""

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
