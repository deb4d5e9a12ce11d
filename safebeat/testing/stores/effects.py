"""Effect keys: claimed once until released or expired, pruned, compared exactly."""

from __future__ import annotations

import time
from datetime import timedelta

from safebeat.stores.protocols import Store
from safebeat.testing.stores.support import HOUR, LOOKALIKES, StoreFactory, claim_key, race


class EffectKeyCases:
    """The contract's cases on effect keys; `StoreContract` runs them."""

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
        wins = race(stores, lambda store, i: claim_key(store, namespace, f"owner-{i}"))
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
