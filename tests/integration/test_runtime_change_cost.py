"""A change of one entry added at run time costs that one entry on real SQLite and
PostgreSQL: one definition registered, one entry planned, and the store left as a full
registration would leave it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from celery import Celery

import safebeat.schedules
from safebeat import Scheduler
from safebeat.beat.housekeeping import Definitions
from safebeat.records import EntryState
from safebeat.stores import Store, open_store
from safebeat.testing import FakeClock
from tests.integration.beat import tick_until
from tests.schedule_changes import Counting, code_entries
from tests.unit.test_scheduler import drain

QUEUE = "q-runtime-change"
CODE_ENTRIES = 300


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    if request.param == "sqlite":
        return sqlite_url
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    opened = open_store(store_url)
    opened.migrate()
    yield opened
    opened.close()


def make_app(store_url: str, namespace: str) -> Celery:
    app = Celery("runtime-change", broker="memory://", set_as_current=False)
    app.conf.update(
        task_default_queue=QUEUE,
        result_expires=None,
        safebeat_url=store_url,
        safebeat_namespace=namespace,
        beat_schedule=code_entries(CODE_ENTRIES),
    )
    return app


def sent(app: Celery, entry: str) -> list[dict[str, Any]]:
    return [m for m in drain(app, QUEUE) if m["safebeat_entry"] == entry]


def test_one_runtime_entry_among_many_is_registered_planned_and_sent_alone(
    store: Store, store_url: str, namespace: str
) -> None:
    """Added among 300 code entries, an entry is the only one registered and planned, and
    is sent; edited to another schedule, it alone is registered again and is sent on the
    new one; removed, nothing is registered and it is sent no more."""
    app = make_app(store_url, namespace)
    clock = FakeClock()
    scheduler = Scheduler(app, store=store, monotonic=clock.monotonic)
    try:
        tick_until(
            scheduler, clock, lambda: len(scheduler.engine.pacing.due(clock.monotonic(), 1)) == 0
        )
        counting = Counting(store)
        drain(app, QUEUE)

        safebeat.schedules.add(app, "added", "t.run", 1, store=store)
        tick_until(scheduler, clock, lambda: "added" in scheduler.entries)
        assert counting.registered == [["added"]]
        assert set(counting.loaded) == {"added"}
        scheduler.engine.chores.next_heartbeat = 0.0
        scheduler.tick()
        assert counting.heartbeated == ["added"]  # its digest alone
        received: list[dict[str, Any]] = []
        tick_until(scheduler, clock, lambda: bool(received.extend(sent(app, "added")) or received))

        counting.reset()
        safebeat.schedules.update(app, "added", "t.run", 3, args=[2], store=store)
        tick_until(scheduler, clock, lambda: scheduler.entries["added"].args == (2,))
        assert counting.registered == [["added"]]
        edited: list[dict[str, Any]] = []

        def two_new_windows() -> bool:
            edited.extend(m for m in sent(app, "added") if m["argsrepr"] == "[2]")
            return len(edited) >= 2

        tick_until(scheduler, clock, two_new_windows)
        first, second = sorted(datetime.fromisoformat(m["safebeat_window"]) for m in edited[:2])
        assert second - first == timedelta(seconds=3)

        counting.reset()
        safebeat.schedules.remove(app, "added", store=store)
        tick_until(scheduler, clock, lambda: "added" not in scheduler.entries)
        drain(app, QUEUE)
        end = clock.monotonic() + 4
        tick_until(scheduler, clock, lambda: clock.monotonic() >= end)
        assert sent(app, "added") == []
        assert counting.registered == []
        assert "added" not in counting.loaded
        scheduler.engine.chores.next_heartbeat = 0.0
        scheduler.tick()
        assert counting.heartbeated == ["added"]  # its name, removed
    finally:
        scheduler.close()


def test_set_up_again_the_first_runtime_change_registers_that_entry_alone(
    store: Store, store_url: str, namespace: str
) -> None:
    """Set up a second time (Celery sets a scheduler up when it builds it), a replica
    still runs the entries added at run time, and the first one added after that is the
    only one registered."""
    app = make_app(store_url, namespace)
    clock = FakeClock()
    safebeat.schedules.add(app, "early", "t.run", 60, store=store)
    scheduler = Scheduler(app, store=store, monotonic=clock.monotonic)
    try:
        tick_until(
            scheduler, clock, lambda: len(scheduler.engine.pacing.due(clock.monotonic(), 1)) == 0
        )
        scheduler.setup_schedule()
        tick_until(
            scheduler, clock, lambda: len(scheduler.engine.pacing.due(clock.monotonic(), 1)) == 0
        )
        assert len(scheduler.entries) == CODE_ENTRIES + 1
        counting = Counting(store)
        safebeat.schedules.add(app, "added", "t.run", 60, store=store)
        tick_until(scheduler, clock, lambda: "added" in scheduler.entries)
        assert counting.registered == [["added"]]
        assert set(counting.loaded) == {"added"}
    finally:
        scheduler.close()


def comparable(states: dict[str, EntryState]) -> dict[str, tuple[object, ...]]:
    return {
        name: (s.digest, s.schedule, s.anchor, s.defined_at, s.last_window, s.paused)
        for name, s in states.items()
    }


def test_registering_a_change_leaves_the_store_as_registering_every_entry_would(
    store: Store, store_url: str, namespace: str
) -> None:
    """After an add, an edit of its arguments and a rename, each registered alone, a full
    registration of every entry finds nothing to change and changes no state; the
    heartbeats, each with what changed, leave every digest this replica runs recorded."""
    app = make_app(store_url, namespace)
    clock = FakeClock()
    scheduler = Scheduler(app, store=store, monotonic=clock.monotonic)
    try:
        for change in (
            lambda: safebeat.schedules.add(app, "a", "t.run", 60, args=[1], store=store),
            lambda: safebeat.schedules.update(app, "a", "t.run", 60, args=[2], store=store),
            lambda: safebeat.schedules.remove(app, "a", store=store),
            lambda: safebeat.schedules.add(app, "b", "t.run", "*/5 * * * *", store=store),
        ):
            change()
            version = store.runtime_version(namespace)
            tick_until(scheduler, clock, lambda v=version: scheduler.engine.runtime.version == v)
            tick_until(scheduler, clock, lambda: not scheduler.engine._unregistered)
        entries = scheduler.entries
        assert entries["code-1"].args == (1,)
        before = comparable(store.states(namespace))
        registration = store.register(
            namespace, Definitions(list(entries.values())), scheduler.replica
        )
        assert dict(registration.changed) == {}
        assert comparable(store.states(namespace)) == before
        assert {n: e.digest for n, e in entries.items()}.items() <= {
            n: s[0] for n, s in before.items()
        }.items()
        scheduler.engine.chores.next_heartbeat = 0.0
        scheduler.tick()
        (record,) = [r for r in store.replicas(namespace) if r.replica == scheduler.replica.id]
        assert dict(record.definitions) == {n: e.digest for n, e in entries.items()}
    finally:
        scheduler.close()
