"""Two replicas registering entries at once both succeed, however their slices fall.

A registration is one transaction of several slices, and each slice's writes lock their
rows until the commit. Replicas of two releases (a rolling upgrade that reordered or
changed `beat_schedule`), or a django-celery-beat table read in another order, hold the
same names in other orders or other cuts of slices: replica A could hold a row B's next
slice needs while B holds one A's next slice needs, and the server would kill one as a
deadlock (its beat retries, and a start takes longer for nothing). The stores take a
registration turn per namespace before their first write, so the second waits for the
first to end instead. Here the two registrations are made to interleave: each waits,
right after its first write, for the other's first write (for a second at most: where
the other waits for this one's turn, it cannot write yet).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest
from django.db.models.query import QuerySet

from safebeat.errors import StoreError
from safebeat.identity import Replica
from safebeat.records import Definition
from safebeat.stores.django import DjangoStore, vendors
from safebeat.stores.django.orm import REGISTER_SLICE as ORM_SLICE
from safebeat.stores.postgres import tick as tick_statements
from safebeat.stores.postgres.cursors import Q
from safebeat.stores.postgres.tick import REGISTER_SLICE as POSTGRES_SLICE
from safebeat.stores.protocols import Store
from tests import djangosite
from tests.registering import ROW_LOCKING_STORES, opened_stores

ENTRIES = 12_000  # more than one slice of every store here (PostgreSQL 5,000; Django 1,000)
FIRST, SECOND = Replica("host-a", 1, "aaaaaa"), Replica("host-b", 2, "bbbbbb")


@pytest.fixture(params=ROW_LOCKING_STORES)
def open_store(request: pytest.FixtureRequest) -> Iterator[Callable[[], Store]]:
    """Store instances on one backing store, each with a connection of its own."""
    yield from opened_stores(request)


class _WatchedCursor:
    """A PostgreSQL cursor that calls `wrote` after each of a slice's writes."""

    def __init__(self, cursor: Any, wrote: Callable[[], None]) -> None:
        self._cursor, self._wrote = cursor, wrote

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def execute(self, query: Any, params: Any = None) -> Any:
        result = self._cursor.execute(query, params)
        if query in (Q["update_entries"], Q["insert_entries"]):
            self._wrote()
        return result


def after_writes(monkeypatch: pytest.MonkeyPatch, wrote: Callable[[], None]) -> None:
    """Call `wrote` after each write of a registration: PostgreSQL's statements (of
    PostgresStore and of django:// on PostgreSQL) and the Django ORM store's (on MariaDB
    here)."""
    slice_of = tick_statements._register_slice
    monkeypatch.setattr(
        tick_statements,
        "_register_slice",
        lambda cursor, *args, **kwargs: slice_of(_WatchedCursor(cursor, wrote), *args, **kwargs),
    )
    create, update = QuerySet.bulk_create, QuerySet.update

    def bulk_create(self: QuerySet[Any], objs: Any, *args: Any, **kwargs: Any) -> Any:
        objs = list(objs)
        created = create(self, objs, *args, **kwargs)
        if objs:
            wrote()
        return created

    def updated(self: QuerySet[Any], **kwargs: Any) -> Any:
        count = update(self, **kwargs)
        wrote()
        return count

    monkeypatch.setattr(QuerySet, "bulk_create", bulk_create)
    monkeypatch.setattr(QuerySet, "update", updated)


def interleave_first_writes(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Make each registering thread wait, right after its first write, until the other has
    written too (one second at most: where the other waits for this one to end, it cannot
    write first); return the threads that wrote."""
    meeting = threading.Barrier(2, timeout=1.0)
    wrote: set[str] = set()

    def after_write() -> None:
        name = threading.current_thread().name
        if name.startswith("register-") and name not in wrote:
            wrote.add(name)
            with contextlib.suppress(threading.BrokenBarrierError):
                meeting.wait()

    after_writes(monkeypatch, after_write)
    return wrote


def register_at_once(
    stores: Sequence[Store],
    namespace: str,
    orders: Sequence[Sequence[Definition]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Register `orders[0]` with `stores[0]` and `orders[1]` with `stores[1]` at once, their
    first writes interleaved; both must succeed."""
    interleaved = interleave_first_writes(monkeypatch)
    errors: dict[str, BaseException] = {}

    def register(store: Store, order: Sequence[Definition], replica: Replica) -> None:
        try:
            store.register(namespace, order, replica)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors[replica.id] = exc

    threads = [
        threading.Thread(
            target=register, args=(store, order, replica), name=f"register-{replica.host}"
        )
        for store, order, replica in zip(stores, orders, (FIRST, SECOND), strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == {}
    # The hook ran; the second may have found nothing left to write once its turn came.
    assert interleaved


def test_opposite_orders_register_every_entry_without_a_deadlock(
    open_store: Callable[[], Store], namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    definitions = [Definition(f"entry-{i:05d}", "every 60s", "d") for i in range(ENTRIES)]
    stores = [open_store(), open_store()]
    register_at_once(stores, namespace, [definitions, definitions[::-1]], monkeypatch)
    assert len(stores[0].states(namespace)) == ENTRIES


def test_two_releases_whose_slices_are_cut_apart_register_without_a_deadlock(
    open_store: Callable[[], Store], namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two releases in name order: B lacks the first entry, so its slices start one name
    later than A's. Around A's second slice's start, one entry is new and the next one
    changed, each release with a digest of its own: A writes both in its second slice,
    B one in its first and the other in its second, in the opposite order to A's (where a
    slice writes its changed entries before its new ones, as on PostgreSQL, the changed
    one comes second; where it inserts first, as the Django ORM does, the new one does).
    """
    stores = [open_store(), open_store(), open_store()]
    orm = hasattr(stores[0], "_register_slice")
    size = ORM_SLICE if orm else POSTGRES_SLICE
    names = [f"entry-{i:05d}" for i in range(2 * size)]
    first, second = names[size], names[size + 1]
    new, changed = (second, first) if orm else (first, second)

    def release(digest: str, listed: Sequence[str]) -> list[Definition]:
        return [Definition(n, "every 60s", digest if n == changed else "d0") for n in listed]

    stores[2].register(namespace, release("d0", [n for n in names if n != new]), FIRST)
    a, b = release("d1", names), release("d2", names[1:])
    register_at_once(stores[:2], namespace, [a, b], monkeypatch)
    assert set(stores[2].states(namespace)) == set(names)


def test_a_restart_that_changes_nothing_does_not_wait_for_a_registration(
    open_store: Callable[[], Store], namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a registration that writes takes the namespace's turn: while one replica holds
    it (stopped right after its first write), another whose entries are all registered
    already registers them at once."""
    definitions = [Definition(f"entry-{i:05d}", "every 60s", "d0") for i in range(ENTRIES)]
    stores = [open_store(), open_store()]
    stores[0].register(namespace, definitions, FIRST)
    inside, thaw = threading.Event(), threading.Event()

    def freeze() -> None:
        if threading.current_thread().name == "register-writer":
            inside.set()
            thaw.wait(30)

    after_writes(monkeypatch, freeze)
    changed = [Definition("entry-00000", "every 60s", "d1"), *definitions[1:]]
    writer = threading.Thread(
        target=stores[0].register, args=(namespace, changed, FIRST), name="register-writer"
    )
    writer.start()
    try:
        assert inside.wait(30)
        started = time.monotonic()
        assert stores[1].register(namespace, definitions, SECOND).changed == {}
        assert time.monotonic() - started < 2  # it did not wait for the writer's turn
        assert writer.is_alive()  # the writer still holds its turn
    finally:
        thaw.set()
        writer.join(30)
    assert stores[1].states(namespace)["entry-00000"].schedule == "every 60s"


def test_a_registration_reads_what_the_one_before_it_committed(
    open_store: Callable[[], Store], namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registers an entry and is slow to commit after its write; B registers the same
    entry with another definition meanwhile. B's turn comes after A's commit, so B reads
    A's definition, replaces it and says so (on MySQL/MariaDB the turn used to end before
    the commit: B read the old rows, its insert was ignored and its definition lost)."""
    first, second = open_store(), open_store()

    def slow() -> None:
        if threading.current_thread().name == "register-slow":
            time.sleep(0.7)  # between its write and its commit

    after_writes(monkeypatch, slow)  # PostgreSQL: its lock lasts until its commit
    turn_of = vendors.registration_turn

    @contextlib.contextmanager
    def slow_turn(*args: Any) -> Iterator[Callable[[], bool]]:
        with turn_of(*args) as turn:
            yield turn
        slow()  # the Django ORM store: after its turn, before its commit if that came after

    monkeypatch.setattr(vendors, "registration_turn", slow_turn)
    a = Definition("report", "every 60s", "dA")
    writer = threading.Thread(
        target=first.register, args=(namespace, [a], FIRST), name="register-slow"
    )
    writer.start()
    time.sleep(0.3)
    registration = second.register(namespace, [Definition("report", "every 60s", "dB")], SECOND)
    writer.join(30)
    assert registration.changed == {"report": "dA"}
    assert second.states(namespace)["report"].digest == "dB"


@pytest.mark.django
@pytest.mark.mariadb
def test_a_refused_row_on_mariadb_leaves_the_turn_to_the_other_replicas(
    request: pytest.FixtureRequest, namespace: str
) -> None:
    """A row the server refuses (a CHECK constraint here) fails that registration; the
    registration turn must not stay with the failed session, or no other replica could
    register anything while its connection lives."""
    from django.db import connections

    alias = djangosite.alias_for(request, "mariadb")
    store = DjangoStore(f"django://{alias}", lock_timeout=timedelta(seconds=1))
    store.migrate()
    store.register(namespace, [Definition("report", "every 60s", "d0")], FIRST)
    table = connections[alias].ops.quote_name("safebeat_entry")
    with connections[alias].cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT refuse_bad CHECK (schedule <> 'bad')")
    try:
        with pytest.raises(StoreError, match="refuse_bad"):
            store.register(namespace, [Definition("report", "bad", "d1")], FIRST)
        other: dict[str, object] = {}

        def register_elsewhere() -> None:
            elsewhere = DjangoStore(f"django://{alias}", lock_timeout=timedelta(seconds=1))
            try:
                other["changed"] = elsewhere.register(
                    namespace, [Definition("nightly", "every 60s", "d0")], SECOND
                ).changed
            except StoreError as exc:
                other["error"] = exc
            finally:
                elsewhere.close()

        thread = threading.Thread(target=register_elsewhere)
        thread.start()
        thread.join(30)
        assert other == {"changed": {}}
    finally:
        with connections[alias].cursor() as cursor:
            cursor.execute(f"ALTER TABLE {table} DROP CONSTRAINT refuse_bad")
        store.close()
