"""safebeat's store contract, run against the example store: what a plugin's author runs.

What it needs: safebeat, pytest, and this package installed (`pip install .`), so that
its entry point opens `examplesqlite://` URLs. Run it with `pytest test_example_store.py`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from safebeat import stores
from safebeat.stores.protocols import Store
from safebeat.testing.stores import StoreContract, StoreFactory


class TestExampleStore(StoreContract):
    """Every case of the contract, on stores opened by URL through the entry point."""

    @pytest.fixture
    def open_store(self, tmp_path: Path) -> Iterator[StoreFactory]:
        opened: list[Store] = []

        def factory() -> Store:
            store = stores.open_store(f"examplesqlite:///{tmp_path}/store.sqlite3")
            store.migrate()
            opened.append(store)
            return store

        yield factory
        for store in opened:
            store.close()

    @pytest.fixture
    def namespaces_share_tick_lock(self) -> bool:
        return True  # SQLite: one write lock per file
