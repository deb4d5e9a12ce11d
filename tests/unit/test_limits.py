"""One boundary for every value from outside (`safebeat.limits`, docs/limits.md): a value not
every store could hold and read back is refused once, before anything is stored, with an
error naming the value and the limit; a value inside the limits works.

Each case here once got through: stored and then unreadable (a pause ending after 9999),
refused by a store mid-tick (a NUL in a name), or an unnamed OverflowError or
RecursionError."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import safebeat.schedules
from safebeat.config import Config, load_config
from safebeat.entries import compile_entry, compile_schedule
from safebeat.errors import ConfigError, EntryError
from safebeat.identity import Replica
from safebeat.limits import (
    MAX_DEPTH,
    NAME_BYTES,
    NAMESPACE_BYTES,
    NOTE_CHARS,
    LimitError,
    check_instant,
)
from safebeat.ops import operations
from safebeat.records import Definition, Pause
from safebeat.stores.memory import MemoryStore
from safebeat.stores.postgres.cursors import tick_limits
from safebeat.testing import FakeClock
from tests.unit.test_scheduler import START, make_app

UTC = timezone.utc
REPLICA = Replica("host-a", 1, "aaaaaa")
#: Names no store can hold and read back, each for one reason.
BAD_NAMES = {
    "nul": "a\x00b",
    "lone surrogate": "a\ud800b",
    "too many bytes": "x" * (NAME_BYTES + 1),
    "too many bytes in two-byte letters": "é" * (NAME_BYTES // 2 + 1),
    "escape": "red\x1b[31m",
    "newline": "two\nlines",
    "line separator": "a\u2028b",
}
#: Instants beyond year 9998 or before year 2 in UTC, as written with a zone.
BAD_INSTANTS = {
    "after 9999 in UTC": "9999-12-31T23:59:59-12:00",
    "year 1": "0001-01-01T00:00:00+00:00",
    "before year 1 in UTC": "0001-01-01T00:00:00+14:00",
    "year 9999": "9999-06-01T00:00:00+00:00",
}


def deeply_nested(depth: int) -> list[Any]:
    outer = inner = []
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return outer


def entry_item(task: str = "t.run", **extra: Any) -> dict[str, Any]:
    return {"task": task, "schedule": 60.0, **extra}


# --- names and namespaces -------------------------------------------------------------------


@pytest.mark.parametrize("name", BAD_NAMES.values(), ids=BAD_NAMES.keys())
def test_an_entry_name_no_store_holds_is_an_entry_error_and_the_others_compile(name: str) -> None:
    """A NUL, a lone surrogate, a control character or more than 255 UTF-8 bytes in an
    entry name make that entry broken, saying the limit; the good entry compiles."""
    entries, broken = compile_schedule(
        {name: entry_item(), "good": entry_item()}, app_timezone=UTC, config=Config()
    )
    assert list(entries) == ["good"]
    assert "limits: docs/limits.md" in str(broken[name])


@pytest.mark.parametrize("task", BAD_NAMES.values(), ids=BAD_NAMES.keys())
def test_a_task_name_no_store_holds_is_an_entry_error_naming_it(task: str) -> None:
    """The task name is checked as the entry name is: the error says 'task name'."""
    with pytest.raises(EntryError, match="task name") as caught:
        compile_entry("e", entry_item(task), app_timezone=UTC, config=Config())
    assert caught.value.entry == "e"


def test_names_at_the_limit_compile() -> None:
    """255 bytes (ASCII or two-byte letters), right-to-left text and emoji are names."""
    for name in ("x" * NAME_BYTES, "é" * (NAME_BYTES // 2), "שלום-עולם", "🙂 nightly"):
        assert compile_entry(name, entry_item(), app_timezone=UTC, config=Config()).name == name


@pytest.mark.parametrize(
    "namespace",
    ["}x", "a{b}", "x" * (NAMESPACE_BYTES + 1), "a\x00b", "a\ud800", "a\tb"],
    ids=["closing brace", "hash tag", "too long", "nul", "surrogate", "tab"],
)
def test_a_namespace_no_store_holds_is_a_config_error_naming_the_setting(namespace: str) -> None:
    """safebeat_namespace with a brace (Redis Cluster's hash tag), a NUL, a control
    character or more than 100 bytes is refused at startup, naming the setting."""
    with pytest.raises(ConfigError, match="safebeat_namespace"):
        load_config({"safebeat_namespace": namespace}, environ={})


def test_ordinary_namespaces_load() -> None:
    """Dots, dashes, colons and letters of any script make a namespace."""
    for namespace in ("proj", "billing.prod:eu-1", "имя", "x" * NAMESPACE_BYTES):
        assert load_config({"safebeat_namespace": namespace}, environ={}).namespace == namespace


# --- durations ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0.0005, "0.5ms", timedelta(microseconds=999)])
def test_a_lock_timeout_under_a_millisecond_is_refused(value: object) -> None:
    """PostgreSQL reads a timeout written as 0ms as none: under 1 ms is a ConfigError."""
    with pytest.raises(ConfigError, match=r"safebeat_lock_timeout.*at least 1ms"):
        load_config({"safebeat_lock_timeout": value}, environ={})


def test_no_timeout_is_written_as_0ms() -> None:
    """The tick's PostgreSQL limits round up to whole milliseconds, never down to 0ms."""
    limits = tick_limits(timedelta(microseconds=500), timedelta(microseconds=1))
    assert limits == {"idle": "1ms", "lock": "1ms", "statement": "1ms"}
    assert tick_limits(timedelta(seconds=5), timedelta(seconds=60))["lock"] == "5000ms"


# --- instants -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", BAD_INSTANTS.values(), ids=BAD_INSTANTS.keys())
def test_an_instant_outside_years_2_to_9998_is_a_limit_error(text: str) -> None:
    """An instant is checked after conversion to UTC: `-12:00` on 31 December 9999 is 10000."""
    with pytest.raises(LimitError, match="outside the years 2 to 9998") as caught:
        check_instant(datetime.fromisoformat(text), "--until")
    assert str(caught.value).startswith(f"--until {text}")


@pytest.mark.parametrize("text", BAD_INSTANTS.values(), ids=BAD_INSTANTS.keys())
def test_a_one_off_entry_at_the_edges_of_time_is_refused_before_it_is_stored(text: str) -> None:
    """`schedules.add` (and `schedule add --at`) with such an instant: an EntryError naming
    the entry and the limit, not an OverflowError, and nothing stored."""
    app = make_app("q-limits", {})
    store = MemoryStore(clock=FakeClock(START).now)
    at = datetime.fromisoformat(text)
    with pytest.raises(EntryError, match=r"one-off time.*outside the years 2 to 9998"):
        safebeat.schedules.add(app, "once", "t.run", at, store=store)
    assert store.runtime_entries("unit") == {}


def test_a_clocked_time_or_bound_outside_the_years_is_an_entry_error() -> None:
    """An entry's `start`/`end` option outside the years is an EntryError naming the option."""
    raw = entry_item(options={"safebeat": {"end": "9999-12-31T23:59:59-12:00"}})
    with pytest.raises(EntryError, match=r"\['end'\].*outside the years 2 to 9998"):
        compile_entry("e", raw, app_timezone=UTC, config=Config())


# --- entries added at run time --------------------------------------------------------------


@pytest.mark.parametrize("name", BAD_NAMES.values(), ids=BAD_NAMES.keys())
def test_add_refuses_a_name_no_store_holds_and_stores_nothing(name: str) -> None:
    """`schedules.add` checks the name before the store sees it."""
    app = make_app("q-limits", {})
    store = MemoryStore(clock=FakeClock(START).now)
    with pytest.raises(EntryError, match=r"limits: docs/limits\.md"):
        safebeat.schedules.add(app, name, "t.run", 30, store=store)
    assert store.runtime_entries("unit") == {}


def test_add_refuses_kwargs_nested_thousands_deep_naming_the_limit() -> None:
    """kwargs nested 5,000 deep are an EntryError naming the depth limit, not a RecursionError."""
    app = make_app("q-limits", {})
    store = MemoryStore(clock=FakeClock(START).now)
    with pytest.raises(EntryError, match=f"more than {MAX_DEPTH} deep"):
        safebeat.schedules.add(
            app, "deep", "t.run", 30, kwargs={"a": deeply_nested(5000)}, store=store
        )
    assert store.runtime_entries("unit") == {}


def test_remove_refuses_a_name_no_store_holds() -> None:
    """`schedules.remove` of such a name is a LimitError, not a store's error."""
    app = make_app("q-limits", {})
    with pytest.raises(LimitError, match="NUL"):
        safebeat.schedules.remove(app, "a\x00b", store=MemoryStore())


# --- operator actions -----------------------------------------------------------------------


@pytest.fixture
def store() -> MemoryStore:
    clock = FakeClock(START)
    store = MemoryStore(clock=clock.now)
    store.register("unit", [Definition("victim", "every 60s", "d")], REPLICA)
    return store


@pytest.mark.parametrize("text", BAD_INSTANTS.values(), ids=BAD_INSTANTS.keys())
def test_a_pause_ending_outside_the_years_is_refused_before_it_is_stored(
    store: MemoryStore, text: str
) -> None:
    """`pause --until 9999-12-31T23:59:59-12:00` stored the pause, which no store could read
    back; now it is a LimitError naming --until, and the entry stays as it was."""
    pause = Pause(True, datetime.fromisoformat(text), "maintenance")
    with pytest.raises(LimitError, match=r"--until .*outside the years 2 to 9998"):
        operations.pause_entry(store, "unit", "victim", pause, actor="ops@host")
    assert not store.states("unit")["victim"].paused
    assert store.audit("unit") == []


def test_a_note_over_the_limit_or_with_a_nul_is_refused(store: MemoryStore) -> None:
    """A pause's note is at most 1,000 characters and holds no NUL; one at the limit works."""
    for note in ("x" * (NOTE_CHARS + 1), "a\x00b", "\udc80"):
        with pytest.raises(LimitError, match="note"):
            operations.pause_entry(store, "unit", "victim", Pause(True, None, note), actor="a")
    assert not store.states("unit")["victim"].paused
    operations.pause_entry(store, "unit", "victim", Pause(True, None, "x" * NOTE_CHARS), actor="a")
    assert store.states("unit")["victim"].pause_note == "x" * NOTE_CHARS


@pytest.mark.parametrize("name", BAD_NAMES.values(), ids=BAD_NAMES.keys())
def test_an_action_on_a_name_no_store_holds_is_refused(store: MemoryStore, name: str) -> None:
    """pause, forget: a LimitError before the store is asked."""
    with pytest.raises(LimitError):
        operations.pause_entry(store, "unit", name, Pause(True), actor="a")
    with pytest.raises(LimitError):
        operations.forget_entry(store, "unit", name, actor="a")


def test_an_action_by_an_actor_no_store_holds_is_refused(store: MemoryStore) -> None:
    """The actor is recorded in the audit trail: it is checked like a name."""
    with pytest.raises(LimitError, match="actor"):
        operations.pause_entry(store, "unit", "victim", Pause(True), actor="web\x00admin")
    assert store.audit("unit") == []


def test_backfill_from_year_1_is_a_limit_error_naming_the_option(store: MemoryStore) -> None:
    """`backfill --from 0001-01-01T00:00:00Z` was an OverflowError; now --from is named."""
    app = make_app("q-limits", {"victim": {"task": "t.run", "schedule": 60.0}})
    entry = compile_entry("victim", entry_item(), app_timezone=UTC, config=Config())
    with pytest.raises(LimitError, match="--from 0001-01-01T00:00:00"):
        operations.backfill(
            app,
            store,
            "unit",
            entry,
            start=datetime(1, 1, 1, tzinfo=UTC),
            end=START - timedelta(hours=1),
            actor="a",
        )
    assert store.history("unit") == []
