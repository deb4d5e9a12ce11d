"""Runtime entries stored for every replica."""

from __future__ import annotations

from safebeat.stores.protocols import Store
from safebeat.testing.stores.support import StoreFactory, claimed, race


class RuntimeEntryCases:
    """The contract's cases on runtime entries; `StoreContract` runs them."""

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
        [claim] = claimed(store, namespace, "a", 1)
        window = claim.window
        assert store.delete_runtime_entry(namespace, "a")
        assert "a" in store.states(namespace)
        assert [r.window for r in store.history(namespace, "a")] == [window]

    def test_concurrent_adds_of_one_runtime_entry_have_one_winner(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """Of several replicas adding the same name at once, exactly one stores it."""
        stores = [open_store() for _ in range(4)]
        results = race(
            stores, lambda store, i: store.save_runtime_entry(namespace, "x", f"{i}", replace=False)
        )
        assert sorted(results) == [False, False, False, True]
        assert stores[0].runtime_version(namespace) == 1
