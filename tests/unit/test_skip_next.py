"""`skip-next` (a row of `safebeat.ops.actions.ACTIONS`): the entry's next window is
recorded as skipped with reason `operator` and audited; beat then leaves it, and sends
the next one; refused for a paused entry and for one with no window left."""

from __future__ import annotations

import dataclasses
from datetime import timedelta, timezone

import pytest

from safebeat.config import Config
from safebeat.entries import compile_entry
from safebeat.identity import Replica
from safebeat.ops import actions
from safebeat.ops.operations import OperationError
from safebeat.ops.overview import HISTORY_DEPTH, entry_status, entry_statuses
from safebeat.records import AuditAction, Definition, Pause
from safebeat.stores.memory import MemoryStore
from safebeat.stores.protocols import Status
from safebeat.testing import FakeClock
from safebeat.windows.rules import ClockedRule
from tests.unit.test_scheduler import START

ENTRY = compile_entry(
    "report", {"task": "t", "schedule": 60.0}, app_timezone=timezone.utc, config=Config()
)
SKIP = actions.ACTIONS["skip-next"]


def _store() -> MemoryStore:
    store = MemoryStore(clock=FakeClock(START).now)
    store.register("unit", [Definition("report", "every 60s", "d")], Replica("h", 1, "aaaaaa"))
    return store


def _target(store: MemoryStore, entry: object = ENTRY) -> actions.Target:
    return actions.Target(store, "unit", "report", "ops@host", compile=lambda: entry)  # type: ignore[arg-type,return-value]


def test_skip_next_records_the_next_window_skipped_and_audits_it() -> None:
    store = _store()
    first = SKIP.run(_target(store), SKIP.values({"note": "holiday"}))
    second = SKIP.run(_target(store), SKIP.values({}))
    rows = sorted(store.history("unit", "report"), key=lambda r: r.window)
    assert [(r.status, r.reason, r.task_id) for r in rows] == [
        (Status.SKIPPED, "operator", None)
    ] * 2
    assert rows[0].window > START
    assert rows[1].window - rows[0].window == timedelta(seconds=60)
    audit = store.audit("unit")
    assert [(r.action, r.windows, r.note) for r in audit] == [
        (AuditAction.SKIP, (rows[1].window,), None),
        (AuditAction.SKIP, (rows[0].window,), "holiday"),
    ]
    assert SKIP.audit is AuditAction.SKIP
    assert "is recorded as skipped (reason operator)" in first.headline()
    assert first.headline() != second.headline()
    assert SKIP.needs_app
    assert not SKIP.publishes


def test_skip_next_refuses_a_paused_entry_and_one_with_no_window_left() -> None:
    store = _store()
    once = dataclasses.replace(ENTRY, rule=ClockedRule(START - timedelta(hours=1)))
    with pytest.raises(OperationError, match="no window after"):
        SKIP.run(_target(store, once), SKIP.values({}))
    store.set_paused("unit", "report", Pause(True))
    with pytest.raises(OperationError, match="is paused"):
        SKIP.run(_target(store), SKIP.values({}))
    assert store.history("unit", "report") == []
    assert store.audit("unit") == []


def test_skip_next_refuses_an_entry_not_registered() -> None:
    store = MemoryStore(clock=FakeClock(START).now)
    with pytest.raises(OperationError, match="no entry 'report' is registered"):
        SKIP.run(_target(store), SKIP.values({}))


def test_status_shows_the_window_after_the_skipped_one_as_next() -> None:
    store = _store()
    state = store.states("unit")["report"]
    before = entry_status(state, store.history("unit", "report"), ENTRY, START).next_window
    SKIP.run(_target(store), SKIP.values({}))
    [row] = store.history("unit", "report")
    after = entry_status(state, store.history("unit", "report"), ENTRY, START).next_window
    assert row.window == before
    assert after == before + timedelta(seconds=60)


def test_skip_next_refusing_a_pause_with_an_end_names_the_end() -> None:
    """A pause with an end resumes by itself: the refusal says when, not 'until it is
    resumed', and leaves no row."""
    store = _store()
    end = START + timedelta(hours=2)
    store.set_paused("unit", "report", Pause(True, until=end))
    with pytest.raises(OperationError) as refused:
        SKIP.run(_target(store), SKIP.values({}))
    assert f"paused until {end.isoformat()}" in str(refused.value)
    assert "until it is resumed" not in str(refused.value)
    assert store.history("unit", "report") == []


def test_status_shows_the_window_after_more_skips_ahead_than_it_reads_rows() -> None:
    """Sixty windows skipped ahead, more than the newest rows `status` reads by default:
    the next window shown is the first one after them, not a skipped one."""
    store = _store()
    for _ in range(HISTORY_DEPTH + 10):
        SKIP.run(_target(store), SKIP.values({}))
    skipped = sorted(r.window for r in store.history("unit", "report", limit=1000))
    assert len(skipped) == HISTORY_DEPTH + 10
    assert skipped[-1] - skipped[0] == timedelta(seconds=60) * (HISTORY_DEPTH + 9)
    [status] = entry_statuses(store, "unit", {"report": ENTRY})
    assert status.next_window == skipped[-1] + timedelta(seconds=60)
