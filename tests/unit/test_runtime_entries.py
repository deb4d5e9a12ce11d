"""Entries added at run time: stored as JSON, read back as beat_schedule items, and picked up
by running schedulers on a controlled clock (memory store, kombu's memory broker)."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone

import pytest
from celery.schedules import crontab

import safebeat.schedules
from safebeat.crontab import crontab as crontab_with_seconds
from safebeat.entries.runtime_definitions import OneOff, decode, encode
from safebeat.errors import EntryError
from safebeat.stores.memory import MemoryStore
from safebeat.testing import FakeClock, memory_scheduler
from tests.unit.test_scheduler import START, drain, make_app, run, windows_sent


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def queue() -> str:
    return "q-runtime"


@pytest.mark.parametrize(
    ("schedule", "stored"),
    [
        (30, {"every": 30.0}),
        (timedelta(minutes=5), {"every": 300.0}),
        ("90s", {"every": 90.0}),
        ("0 9 * * 1-5", {"crontab": "0 9 * * 1-5"}),
        (crontab(minute="0", hour="9", day_of_week="1-5"), {"crontab": "0 9 * * 1-5"}),
        (crontab_with_seconds(second="*/15", minute="0"), {"crontab": "*/15 0 * * * *"}),
        (
            datetime(2026, 12, 24, 18, 0, tzinfo=timezone(timedelta(hours=1))),
            {"at": "2026-12-24T17:00:00+00:00"},
        ),
    ],
)
def test_each_schedule_form_is_stored_as_plain_data(schedule: object, stored: object) -> None:
    """Seconds, crontabs (object or text, with seconds) and one-off times become JSON data."""
    text = encode("e", "t.run", schedule, args=[1], kwargs={"k": "v"})
    assert json.loads(text)["schedule"] == stored


def test_a_stored_definition_reads_back_as_a_beat_schedule_item() -> None:
    """decode gives the task, arguments, options and a schedule object beat compiles."""
    text = encode(
        "e",
        "t.run",
        "*/5 * * * *",
        args=[1, "a"],
        kwargs={"k": 2},
        options={"queue": "q", "safebeat": {"timezone": "Europe/Berlin"}},
    )
    item = decode("e", text)
    assert item["task"] == "t.run"
    assert item["args"] == [1, "a"]
    assert item["kwargs"] == {"k": 2}
    assert item["options"] == {"queue": "q", "safebeat": {"timezone": "Europe/Berlin"}}
    assert item["schedule"].minute == set(range(0, 60, 5))
    at = decode("o", encode("o", "t.run", datetime(2030, 1, 1, tzinfo=timezone.utc)))
    assert at["schedule"] == OneOff(datetime(2030, 1, 1, tzinfo=timezone.utc))


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("61 * * * *", "crontab"),
        ("soon", "cron fields"),
        (0, "positive"),
        (datetime(2030, 1, 1), "no time zone"),
        (object(), "expected seconds"),
    ],
)
def test_a_schedule_that_cannot_be_stored_is_refused_naming_the_entry(
    schedule: object, message: str
) -> None:
    """A bad schedule is an EntryError naming the entry and what is wrong."""
    with pytest.raises(EntryError, match=message) as raised:
        encode("nightly", "t.run", schedule)
    assert raised.value.entry == "nightly"


def test_arguments_that_do_not_survive_json_are_refused() -> None:
    """Arguments that would come back different from JSON (a set, an int key) are refused."""
    with pytest.raises(EntryError, match="JSON"):
        encode("e", "t.run", 10, args=[{1, 2}])
    with pytest.raises(EntryError, match="unchanged"):
        encode("e", "t.run", 10, kwargs={"m": {1: "a"}})


def test_add_refuses_a_name_the_code_defines(clock: FakeClock, queue: str) -> None:
    """A name beat_schedule already has is refused, and nothing is stored."""
    app = make_app(queue, {"nightly": {"task": "t.run", "schedule": 60.0}})
    store = MemoryStore(clock=clock.now)
    with pytest.raises(EntryError, match="beat_schedule"):
        safebeat.schedules.add(app, "nightly", "t.other", 30, store=store)
    assert store.runtime_entries("unit") == {}


def test_add_update_remove_and_list(clock: FakeClock, queue: str) -> None:
    """add stores a new name once; update needs it stored; remove forgets it; list shows it."""
    app = make_app(queue, {})
    store = MemoryStore(clock=clock.now)
    added = safebeat.schedules.add(app, "r", "t.run", 30, kwargs={"x": 1}, store=store)
    assert added.entry.schedule_text == "every 30s"
    with pytest.raises(EntryError, match="already added"):
        safebeat.schedules.add(app, "r", "t.run", 60, store=store)
    with pytest.raises(EntryError, match="add it first"):
        safebeat.schedules.update(app, "other", "t.run", 60, store=store)
    safebeat.schedules.update(app, "r", "t.run", "0 9 * * *", store=store)
    assert list(safebeat.schedules.list(app, store=store)) == ["r"]
    found = safebeat.schedules.get(app, "r", store=store)
    assert found is not None
    assert found.entry.kwargs == {}
    assert safebeat.schedules.remove(app, "r", store=store)
    assert not safebeat.schedules.remove(app, "r", store=store)
    assert safebeat.schedules.list(app, store=store) == {}


def test_running_replicas_pick_up_added_and_removed_entries(clock: FakeClock, queue: str) -> None:
    """Three replicas on one store send an added entry's windows once each from within a
    second of the add, and stop within a second of its removal."""
    app = make_app(queue, {"code": {"task": "t.run", "schedule": 10.0}})
    store = MemoryStore(clock=clock.now)
    replicas = [memory_scheduler(app, clock, store) for _ in range(3)]

    def tick_all(seconds: float) -> None:
        end = clock.monotonic() + seconds
        while clock.monotonic() < end:
            for replica in replicas:
                replica.tick()
            clock.advance(0.25)

    tick_all(2)
    safebeat.schedules.add(app, "added", "t.run", 2, store=store)
    tick_all(1.25)
    assert all("added" in r.entries for r in replicas)
    tick_all(8)
    safebeat.schedules.remove(app, "added", store=store)
    tick_all(1.25)
    assert not any("added" in r.entries for r in replicas)
    tick_all(6)
    sent = windows_sent(drain(app, queue))
    assert max(sent.values()) == 1
    added = sorted(w for e, w in sent if e == "added")
    assert 4 <= len(added) <= 5
    assert all(entry in {"code", "added"} for entry, _ in sent)


def test_a_stored_entry_the_code_defines_later_is_left_out_and_reported(
    clock: FakeClock, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """If the code comes to define a stored entry's name, the code's entry runs and the
    clash is logged with the command that removes the stored one."""
    store = MemoryStore(clock=clock.now)
    safebeat.schedules.add(make_app(queue, {}), "report", "t.stored", 5, store=store)
    app = make_app(queue, {"report": {"task": "t.code", "schedule": 5.0}})
    scheduler = memory_scheduler(app, clock, store)
    with caplog.at_level(logging.ERROR, logger="safebeat.beat.scheduler"):
        run(scheduler, clock, 6)
    assert scheduler.entries["report"].task == "t.code"
    assert "safebeat schedule remove report" in caplog.text


def test_a_replica_reads_only_the_version_while_nothing_changes(
    clock: FakeClock, queue: str
) -> None:
    """While no entry is added or removed, a replica loads no definitions, only the version."""
    store = MemoryStore(clock=clock.now)
    app = make_app(queue, {})
    safebeat.schedules.add(app, "a", "t.run", 60, store=store)
    loads: list[str] = []
    load = store.runtime_entries

    def counted(namespace: str) -> dict[str, str]:
        loads.append(namespace)
        return load(namespace)

    store.runtime_entries = counted  # type: ignore[method-assign]
    run(memory_scheduler(app, clock, store), clock, 10)
    assert loads == ["unit"]


def test_a_subclass_s_own_compiled_entries_run_beside_the_entries_added_at_run_time(
    clock: FakeClock, queue: str
) -> None:
    """A Scheduler subclass that adds entries of its own in `compiled_schedule` keeps them
    when the entries added at run time are read (at the start, and after each change):
    they are not replaced by the code's and the stored ones alone, and go on being sent."""
    from safebeat import Scheduler
    from safebeat.entries import Entry, compile_entry

    class WithOwnEntries(Scheduler):
        def compiled_schedule(self) -> tuple[dict[str, Entry], dict[str, EntryError]]:
            entries, broken = super().compiled_schedule()
            entries["own"] = compile_entry(
                "own",
                {"task": "t.run", "schedule": 2.0},
                app_timezone=self.app.timezone,
                config=self.safebeat_config,
            )
            return entries, broken

    app = make_app(queue, {"code": {"task": "t.run", "schedule": 10.0}})
    store = MemoryStore(clock=clock.now)
    safebeat.schedules.add(app, "stored", "t.run", 5, store=store)
    scheduler = WithOwnEntries(app, store=store, monotonic=clock.monotonic)
    run(scheduler, clock, 3)
    assert set(scheduler.entries) == {"code", "stored", "own"}
    safebeat.schedules.add(app, "added", "t.run", 2, store=store)
    run(scheduler, clock, 3)
    assert set(scheduler.entries) == {"code", "stored", "own", "added"}
    drain(app, queue)
    run(scheduler, clock, 4)
    own = [window for entry, window in windows_sent(drain(app, queue)) if entry == "own"]
    assert len(own) == 2  # every 2 s
