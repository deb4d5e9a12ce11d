"""A change of beat's entries while it runs costs what changed: the diff by digest, and a
running replica registering and planning only the entries added or defined otherwise
(memory store, kombu's memory broker, a controlled clock)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest

import safebeat.schedules
from safebeat.beat.entry_changes import EntryChanges, entry_changes
from safebeat.config import config_from_app
from safebeat.entries import compile_schedule
from safebeat.errors import StoreUnavailable
from safebeat.stores.memory import MemoryStore
from safebeat.testing import FakeClock, memory_scheduler
from tests.schedule_changes import Counting, code_entries
from tests.unit.test_scheduler import START, drain, make_app, run, windows_sent

QUEUE = "q-entry-changes"


def compiled(schedule: dict[str, Any]) -> dict[str, Any]:
    app = make_app(QUEUE, schedule)
    entries, broken = compile_schedule(
        schedule, app_timezone=app.timezone, config=config_from_app(app)
    )
    assert not broken
    return entries


def test_the_diff_names_added_redefined_and_removed_entries_only() -> None:
    """An entry compiled again to the same digest is unchanged; new arguments, a new
    schedule or a new name are changes; a name gone is removed."""
    before = compiled(
        {
            "same": {"task": "t.run", "schedule": 10.0},
            "args": {"task": "t.run", "schedule": 10.0, "args": (1,)},
            "every": {"task": "t.run", "schedule": 10.0},
            "old-name": {"task": "t.run", "schedule": 10.0},
        }
    )
    after = compiled(
        {
            "same": {"task": "t.run", "schedule": 10.0},
            "args": {"task": "t.run", "schedule": 10.0, "args": (2,)},
            "every": {"task": "t.run", "schedule": 20.0},
            "new-name": {"task": "t.run", "schedule": 10.0},
        }
    )
    assert after["same"] is not before["same"]
    assert entry_changes(before, after) == EntryChanges(
        changed=("args", "every", "new-name"), removed=("old-name",)
    )
    assert not entry_changes(before, dict(before))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def test_adding_editing_and_removing_one_entry_registers_and_plans_that_one(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Among 50 code entries, an entry added at run time is the only one registered and
    planned, and is sent; edited (its arguments only), it alone is registered again, with
    no warning of a rolling deploy, and its later windows carry the new arguments; removed,
    nothing is registered, nothing planned, and it is sent no more."""
    app = make_app(QUEUE, code_entries(50))
    store = MemoryStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    counting = Counting(store)
    run(scheduler, clock, 2)
    drain(app, QUEUE)

    counting.reset()
    safebeat.schedules.add(app, "added", "t.run", 2, args=[1], store=store)
    run(scheduler, clock, 1.5)
    assert counting.registered == [["added"]]
    assert counting.loaded == ["added"]
    run(scheduler, clock, 4)
    assert {m["argsrepr"] for m in drain(app, QUEUE)} == {"[1]"}

    counting.reset()
    safebeat.schedules.update(app, "added", "t.run", 2, args=[2], store=store)
    with caplog.at_level(logging.WARNING, logger="safebeat"):
        run(scheduler, clock, 1.5)
    assert "differs from the one registered before" not in caplog.text
    assert counting.registered == [["added"]]
    assert set(counting.loaded) == {"added"}
    drain(app, QUEUE)
    run(scheduler, clock, 4)
    assert {m["argsrepr"] for m in drain(app, QUEUE)} == {"[2]"}

    counting.reset()
    safebeat.schedules.remove(app, "added", store=store)
    run(scheduler, clock, 1.5)
    assert "added" not in scheduler.entries
    assert "added" not in scheduler.engine.pacing.due_at._at  # planned no more
    drain(app, QUEUE)
    run(scheduler, clock, 6)
    assert counting.registered == []
    assert "added" not in {e for e, _ in windows_sent(drain(app, QUEUE))}
    assert "added" not in counting.loaded


def test_a_rename_registers_the_new_name_and_plans_the_old_one_no_more(
    clock: FakeClock,
) -> None:
    """Renaming (a remove and an add) registers only the new name; the old one is sent no
    more, the new one is."""
    app = make_app(QUEUE, code_entries(10))
    store = MemoryStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    safebeat.schedules.add(app, "before", "t.run", 2, store=store)
    run(scheduler, clock, 3)
    counting = Counting(store)
    safebeat.schedules.remove(app, "before", store=store)
    safebeat.schedules.add(app, "after", "t.run", 2, store=store)
    run(scheduler, clock, 1.5)
    assert counting.registered == [["after"]]
    drain(app, QUEUE)
    run(scheduler, clock, 6)
    sent = {e for e, _ in windows_sent(drain(app, QUEUE))}
    assert "after" in sent
    assert "before" not in sent


def test_a_store_failure_while_registering_a_change_falls_back_to_registering_every_entry(
    clock: FakeClock,
) -> None:
    """If the store fails while a changed entry is registered, nothing is claimed until
    every entry is registered again (the start-up path), and the added entry is sent."""
    app = make_app(QUEUE, code_entries(20))
    store = MemoryStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    run(scheduler, clock, 2)
    counting = Counting(store)
    register = store.register
    failures = [StoreUnavailable("the store is down")]

    def failing(namespace: str, definitions: Sequence[Any], replica: Any) -> Any:
        if failures:
            raise failures.pop()
        return register(namespace, definitions, replica)

    store.register = failing  # type: ignore[method-assign]
    safebeat.schedules.add(app, "added", "t.run", 2, store=store)
    scheduler.tick()
    assert not scheduler.engine.ready
    assert counting.loaded == []  # nothing claimed meanwhile
    store.register = register  # type: ignore[method-assign]
    clock.advance(10)  # past the store's backoff
    counting = Counting(store)
    drain(app, QUEUE)
    run(scheduler, clock, 5)
    assert scheduler.engine.ready
    assert len(counting.registered[0]) == 21  # every entry, as at start-up
    assert "added" in {e for e, _ in windows_sent(drain(app, QUEUE))}


def test_an_entry_whose_state_vanished_is_registered_again_in_full(clock: FakeClock) -> None:
    """The safety net holds after a partial registration: a due entry the store lost is
    reported and every entry is registered again before the next claim."""
    app = make_app(QUEUE, code_entries(5))
    store = MemoryStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    safebeat.schedules.add(app, "added", "t.run", 2, store=store)
    run(scheduler, clock, 3)
    store._ns("unit").entries.pop("added")
    counting = Counting(store)
    drain(app, QUEUE)
    run(scheduler, clock, 5)
    assert len(counting.registered[0]) == 6
    assert "added" in {e for e, _ in windows_sent(drain(app, QUEUE))}


def test_a_runtime_change_compiles_the_code_entries_again_only_if_their_items_changed(
    clock: FakeClock,
) -> None:
    """The code's entries are reused while their items are the same; with an item replaced
    in `beat_schedule`, the code is compiled again with the next change, and the replaced
    entry alone is registered, and sent."""
    app = make_app(QUEUE, code_entries(10))
    store = MemoryStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    run(scheduler, clock, 2)
    code = dict(scheduler.entries)
    safebeat.schedules.add(app, "added", "t.run", 60, store=store)
    run(scheduler, clock, 1.5)
    assert all(scheduler.entries[name] is entry for name, entry in code.items())
    counting = Counting(store)
    app.conf.beat_schedule["code-3"] = {"task": "t.code", "schedule": 2.0}
    safebeat.schedules.remove(app, "added", store=store)
    run(scheduler, clock, 1.5)
    assert counting.registered == [["code-3"]]
    assert scheduler.entries["code-3"].schedule_text == "every 2s"
    assert list(scheduler.entries) == list(code)
    drain(app, QUEUE)
    run(scheduler, clock, 5)
    assert "code-3" in {e for e, _ in windows_sent(drain(app, QUEUE))}


def test_a_replica_that_sees_an_edit_late_never_sends_a_window_twice(clock: FakeClock) -> None:
    """Two replicas; one picks up an edit (new schedule, new arguments) at once, the other
    5 s later: every window is sent once, and after both saw it only the new schedule is
    sent, with the new arguments."""
    app = make_app(QUEUE, code_entries(5))
    store = MemoryStore(clock=clock.now)
    first, late = memory_scheduler(app, clock, store), memory_scheduler(app, clock, store)
    safebeat.schedules.add(app, "e", "t.run", 2, args=[1], store=store)

    def tick_both(seconds: float) -> None:
        end = clock.monotonic() + seconds
        while clock.monotonic() < end:
            first.tick()
            late.tick()
            clock.advance(0.25)

    tick_both(5)
    safebeat.schedules.update(app, "e", "t.run", 3, args=[2], store=store)
    late.engine.runtime.next_look = clock.monotonic() + 5
    tick_both(5)
    assert first.entries["e"].args == (2,)
    tick_both(1.5)
    assert late.entries["e"].args == (2,)
    sent = windows_sent(messages := drain(app, QUEUE))
    assert set(sent.values()) == {1}
    tick_both(9)
    after = [m for m in drain(app, QUEUE) if m["safebeat_entry"] == "e"]
    assert {m["argsrepr"] for m in after} == {"[2]"}
    assert 2 <= len(after) <= 4
    assert messages


def test_a_change_made_while_the_store_is_down_is_registered_alone_once_it_is_back(
    clock: FakeClock,
) -> None:
    """If the store fails when beat looks at the stored entries, beat backs off, keeps its
    registration, and once the store answers registers the added entry alone, and sends it."""
    app = make_app(QUEUE, code_entries(10))
    store = MemoryStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    run(scheduler, clock, 2)
    safebeat.schedules.add(app, "added", "t.run", 2, store=store)
    version = store.runtime_version
    down = [StoreUnavailable("the store is down")]

    def failing(namespace: str) -> int | None:
        if down:
            raise down.pop()
        return version(namespace)

    store.runtime_version = failing  # type: ignore[method-assign]
    counting = Counting(store)
    scheduler.engine.runtime.next_look = 0.0
    scheduler.tick()
    assert not down
    assert "added" not in scheduler.entries
    drain(app, QUEUE)
    run(scheduler, clock, 12)
    assert counting.registered == [["added"]]
    assert "added" in {e for e, _ in windows_sent(drain(app, QUEUE))}
