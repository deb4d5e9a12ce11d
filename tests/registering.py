"""Registering entries in a test and reading their states back: `register` returns only
the changed entries, so a test that wants the states reads them with `states`. And the
stores whose registrations lock rows, for the tests of replicas registering at once."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from safebeat.identity import Replica
from safebeat.records import Definition, EntryState
from safebeat.stores.protocols import Store
from tests import djangosite

#: Fixture params: the stores whose registration writes rows under row locks.
ROW_LOCKING_STORES = [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("django-postgres", marks=[pytest.mark.django, pytest.mark.postgres]),
    pytest.param("django-mariadb", marks=[pytest.mark.django, pytest.mark.mariadb]),
]


def opened_stores(request: pytest.FixtureRequest, **settings: Any) -> Iterator[Callable[[], Store]]:
    """The body of a fixture parametrized with `ROW_LOCKING_STORES`: a factory of store
    instances on one backing store, each with a connection of its own and `settings`,
    closed when the test ends."""
    from safebeat.stores.django import DjangoStore
    from safebeat.stores.postgres import PostgresStore

    opened: list[Store] = []

    def factory() -> Store:
        store: Store
        if request.param == "postgres":
            store = PostgresStore(request.getfixturevalue("pg_url"), **settings)
        else:
            alias = djangosite.alias_for(request, request.param.removeprefix("django-"))
            store = DjangoStore(f"django://{alias}", **settings)
        store.migrate()
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


def registered(
    store: Any, namespace: str, definitions: Sequence[Definition], replica: Replica
) -> dict[str, EntryState]:
    """Register `definitions` in `store`; the states of those entries afterwards."""
    store.register(namespace, definitions, replica)
    names = {d.name for d in definitions}
    return {name: state for name, state in store.states(namespace).items() if name in names}
