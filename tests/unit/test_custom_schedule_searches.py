"""A custom schedule class that accepts no window for a long time: its search is done once
and remembered (never redone at each tick), a planner's budget cuts it into short steps
that resume where they stopped, and the other entries are planned meanwhile."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery.schedules import crontab, schedstate, schedule

from safebeat import windows
from safebeat.beat.metrics import BeatMetrics
from safebeat.beat.planning import SEARCH_AGAIN, plan_tick
from safebeat.beat.reporting import report_plan
from safebeat.config import Config
from safebeat.entries import Entry, compile_entry
from safebeat.identity import Replica
from safebeat.ops.overview import entry_status, entry_statuses
from safebeat.records import Definition, EntryState
from safebeat.stores.memory import MemoryStore
from safebeat.windows.searches import MAX_FILTERED_SEARCH, SearchUnfinished, search_budget

UTC = timezone.utc
NOW = datetime(2026, 3, 9, 9, 0, 30, tzinfo=UTC)


class never(schedule):
    """An interval that is never due; counts how often it is asked."""

    asked = 0

    def is_due(self, last_run_at: datetime) -> Any:
        type(self).asked += 1
        return schedstate(False, 60.0)


class from_april(crontab):
    """A crontab every minute, due only from 2026-04-01 (weeks after NOW)."""

    asked = 0

    def is_due(self, last_run_at: datetime) -> Any:
        type(self).asked += 1
        due, next_check = super().is_due(last_run_at)
        return schedstate(due and self.now() >= datetime(2026, 4, 1, tzinfo=UTC), next_check)


def compiled(name: str, value: object) -> Entry:
    return compile_entry(name, {"task": "t", "schedule": value}, app_timezone=UTC, config=Config())


def state(name: str, schedule_text: str = "x") -> EntryState:
    return EntryState(
        name=name,
        anchor=NOW - timedelta(hours=1),
        defined_at=NOW - timedelta(minutes=10),
        last_window=None,
        digest="d",
        schedule=schedule_text,
    )


def test_a_fruitless_search_is_remembered_not_redone() -> None:
    """A class that accepts none of its base's windows is asked about them once: every later
    search through them ends at once with the same error."""
    entry = compiled("never", never(60.0))
    never.asked = 0
    with pytest.raises(ValueError, match="accepts none of the 50000 windows") as first:
        windows.next_window(entry.rule, NOW, NOW)
    assert never.asked == MAX_FILTERED_SEARCH
    for later in (NOW, NOW + timedelta(seconds=5), NOW + timedelta(minutes=3)):
        with pytest.raises(ValueError, match="accepts none") as again:
            windows.next_window(entry.rule, later, NOW)
        assert str(again.value) == str(first.value)
    assert never.asked == MAX_FILTERED_SEARCH  # nothing asked again


def test_a_search_cut_short_by_its_budget_resumes_and_finds_the_same_window() -> None:
    """Under a spent budget a search asks a few windows and stops; asked again it goes on
    from there, and ends at the window an uncut search finds, each window asked once."""
    whole = compiled("whole", from_april(minute="*"))
    from_april.asked = 0
    expected = windows.next_window(whole.rule, NOW)
    asked_whole = from_april.asked
    assert expected == datetime(2026, 4, 1, tzinfo=UTC)

    cut = compiled("cut", from_april(minute="*"))
    from_april.asked = 0
    rounds = 0
    with search_budget(lambda: True):
        while True:
            rounds += 1
            try:
                found = windows.next_window(cut.rule, NOW)
            except SearchUnfinished:
                continue
            break
    assert found == expected
    assert rounds > 100  # many short steps...
    assert from_april.asked == asked_whole  # ...that asked each window once


def test_a_slow_custom_search_never_holds_up_the_other_entries() -> None:
    """With the budget spent, the planner still claims the other entries' windows; the
    custom entry decides nothing, reports no error, and is planned again soon."""
    entries = {
        "custom": compiled("custom", from_april(minute="*")),
        "plain": compiled("plain", 60.0),
    }
    states = {name: state(name) for name in entries}
    with search_budget(lambda: True):
        planned = plan_tick(entries, states, NOW, namespace="ns", retry_after=timedelta(seconds=5))
    assert [c.entry for c in planned.claims] == ["plain"]
    assert not planned.errors
    assert planned.upcoming["custom"] == NOW + SEARCH_AGAIN


def test_an_uncomputable_entry_logs_its_traceback_once(caplog: pytest.LogCaptureFixture) -> None:
    """An entry whose windows cannot be computed is logged with its traceback at the first
    failure, then in one line at each retry, even as its message names another window."""
    metrics = BeatMetrics("ns", "replica", "memory://")
    caplog.set_level(logging.ERROR, logger="safebeat.scheduler")
    said: dict[str, str] = {}
    for minute in range(3):
        try:
            try:
                raise RuntimeError("holiday calendar unreachable")
            except RuntimeError as cause:
                raise ValueError(f"is_due raised when asked about 09:0{minute}") from cause
        except ValueError as exc:
            error = exc
        planned = plan_tick({}, {}, NOW, namespace="ns", retry_after=timedelta(seconds=5))
        report_plan(type(planned)(errors={"bad": error}), metrics, said)
    records = [r for r in caplog.records if "'bad'" in r.getMessage()]
    assert len(records) == 3
    assert records[0].exc_info is not None
    assert [r.exc_info for r in records[1:]] == [None, None]
    assert "still cannot compute its windows" in records[2].getMessage()


def test_status_lists_an_uncomputable_entry_with_its_reason() -> None:
    """`safebeat status` (and the console) keep an entry whose next window cannot be
    computed, with why, rather than fail as a whole."""
    entry = compiled("never", never(60.0))
    status = entry_status(state("never"), [], entry, NOW)
    assert status.next_window is None
    assert status.uncomputable is not None
    assert "accepts none of the 50000 windows" in status.uncomputable


def test_status_does_not_wait_on_a_long_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """`safebeat status` gives custom schedules' searches a budget: an entry whose next
    window is not found within it shows as searching, and the look ends soon."""
    monkeypatch.setattr("safebeat.ops.overview.STATUS_SEARCH_SECONDS", 0.0)
    store = MemoryStore()
    entry = compiled("custom", never(60.0))
    store.register(
        "ns", [Definition("custom", entry.schedule_text, "d")], Replica("h", 1, "aaaaaa")
    )
    [status] = entry_statuses(store, "ns", {"custom": entry})
    assert status.searching
    assert status.next_window is None
    assert status.uncomputable is None
