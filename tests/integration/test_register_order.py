"""Two replicas registering the same new entries in opposite orders both succeed.

Replicas of two releases (a rolling upgrade that reordered `beat_schedule`), or a
django-celery-beat table read in another order, register the same names in different
orders, each in one transaction of several slices. Each slice's inserts lock their rows
until the commit, so if replica A's second slice needs rows B wrote in its first and B's
second needs A's, the server kills one as a deadlock, its beat retries, and a start takes
longer for nothing. The stores register in name order, so the second replica waits for the
first instead. Here the two registrations are made to interleave: each waits, after its
first slice, for the other to finish its own first slice (for a second at most: where the
other is already waiting on this one's rows, it cannot get there).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from safebeat.identity import Replica
from safebeat.records import Definition
from safebeat.stores.django import DjangoStore
from safebeat.stores.postgres import PostgresStore
from safebeat.stores.postgres import tick as tick_statements
from safebeat.stores.protocols import Store
from tests import djangosite

ENTRIES = 12_000  # more than one slice of every store here (PostgreSQL 5,000; Django 1,000)
FIRST, SECOND = Replica("host-a", 1, "aaaaaa"), Replica("host-b", 2, "bbbbbb")


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("django-postgres", marks=[pytest.mark.django, pytest.mark.postgres]),
        pytest.param("django-mariadb", marks=[pytest.mark.django, pytest.mark.mariadb]),
    ]
)
def open_store(request: pytest.FixtureRequest) -> Iterator[Callable[[], Store]]:
    """Store instances on one backing store, each with a connection of its own."""
    opened: list[Store] = []

    def factory() -> Store:
        store: Store
        if request.param == "postgres":
            store = PostgresStore(request.getfixturevalue("pg_url"))
        else:
            alias = djangosite.alias_for(request, request.param.removeprefix("django-"))
            store = DjangoStore(f"django://{alias}")
        store.migrate()
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


def interleave_first_slices(stores: Sequence[Store], monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Make each registering thread wait, after its first slice, until the other has
    written its own first slice too (one second at most); the threads that got there."""
    meeting = threading.Barrier(len(stores), timeout=1.0)
    seen: set[str] = set()

    def after_first(load: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            written = load(*args, **kwargs)
            name = threading.current_thread().name
            if name.startswith("register-") and name not in seen:
                seen.add(name)
                # Broken: the other is waiting for this one's rows; go on.
                with contextlib.suppress(threading.BrokenBarrierError):
                    meeting.wait()
            return written

        return step

    for store in stores:
        if hasattr(store, "_register_slice"):  # the Django ORM store
            monkeypatch.setattr(store, "_register_slice", after_first(store._register_slice))
    # PostgreSQL's statements, of PostgresStore and of django:// on PostgreSQL
    monkeypatch.setattr(
        tick_statements, "_register_slice", after_first(tick_statements._register_slice)
    )
    return seen


def test_opposite_orders_register_every_entry_without_a_deadlock(
    open_store: Callable[[], Store], namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    definitions = [Definition(f"entry-{i:05d}", "every 60s", "d") for i in range(ENTRIES)]
    stores = [open_store(), open_store()]
    interleaved = interleave_first_slices(stores, monkeypatch)
    errors: dict[str, BaseException] = {}

    def register(store: Store, order: Sequence[Definition], replica: Replica) -> None:
        try:
            store.register(namespace, order, replica)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors[replica.id] = exc

    threads = [
        threading.Thread(target=register, args=(stores[0], definitions, FIRST), name="register-a"),
        threading.Thread(
            target=register, args=(stores[1], definitions[::-1], SECOND), name="register-b"
        ),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == {}
    assert len(stores[0].states(namespace)) == ENTRIES
    assert interleaved == {"register-a", "register-b"}
