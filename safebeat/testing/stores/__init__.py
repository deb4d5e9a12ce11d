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

import uuid

import pytest

from safebeat.stores.protocols import Store
from safebeat.testing.stores.claims import ClaimCases
from safebeat.testing.stores.effects import EffectKeyCases
from safebeat.testing.stores.executions import ExecutionCases
from safebeat.testing.stores.history import HistoryCases
from safebeat.testing.stores.leases import LeaseCases
from safebeat.testing.stores.pauses import PauseAndAuditCases
from safebeat.testing.stores.publishing import PublishCases
from safebeat.testing.stores.registration import RegistrationCases
from safebeat.testing.stores.runtime_entries import RuntimeEntryCases
from safebeat.testing.stores.support import OTHER, REPLICA, SECOND, StoreFactory
from safebeat.testing.stores.take_over import TakeOverCases
from safebeat.testing.stores.tick_lock import TickLockCases

__all__ = ["OTHER", "REPLICA", "SECOND", "StoreContract", "StoreFactory"]


class StoreContract(
    RegistrationCases,
    ClaimCases,
    TickLockCases,
    TakeOverCases,
    PublishCases,
    ExecutionCases,
    LeaseCases,
    EffectKeyCases,
    PauseAndAuditCases,
    HistoryCases,
    RuntimeEntryCases,
):
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
