"""A state the store cannot read back costs its own entry, never the namespace: beat puts the
entry aside (said once in the log), the other entries keep every window, and `status`,
`history` and `audit` keep working, showing what is unreadable.

A real Scheduler on a SQLite store driven by a fake clock; the unreadable state is written
with sqlite3, as an older safebeat stored `pause --until 9999-12-31T23:59:59-12:00`. (Every
backend's reading of such rows: tests/integration/test_store_contract.py.)"""

from __future__ import annotations

import itertools
import json
import logging
import sqlite3
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from safebeat import Scheduler
from safebeat.cli import main
from safebeat.records import AuditAction, AuditEvent, Pause
from safebeat.stores.sqlite import SqliteStore
from safebeat.testing import FakeClock
from tests.unit.test_scheduler import START, drain, make_app, run, windows_sent

#: 10000-01-01T00:00:00Z in microseconds since the epoch.
AFTER_9999_US = 253402300800 * 10**6


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> SqliteStore:
    return SqliteStore(f"sqlite:///{tmp_path}/quarantine.sqlite3", clock=clock.now)


def pause_after_9999(store: SqliteStore, entry: str) -> None:
    """What `pause --until 9999-12-31T23:59:59-12:00` stored before the limits."""
    with sqlite3.connect(store.path) as conn:
        conn.execute(
            "UPDATE safebeat_entry SET paused = 1, paused_until = ? WHERE name = ?",
            (AFTER_9999_US, entry),
        )


def test_beat_puts_an_unreadable_entry_aside_and_sends_every_window_of_the_others(
    store: SqliteStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, a running beat dispatched no window of any entry once one state could not
    be read (OverflowError in every tick); now the other entry sends each window once, the
    unreadable one none, and the log says so once; a resume makes it run again."""
    app = make_app(
        "q-quarantine",
        {"victim": {"task": "t.run", "schedule": 1.0}, "other": {"task": "t.run", "schedule": 1.0}},
    )
    scheduler = Scheduler(app, store=store, monotonic=clock.monotonic)
    run(scheduler, clock, 3)
    drain(app, "q-quarantine")
    pause_after_9999(store, "victim")
    poisoned_at = clock.now()
    with caplog.at_level(logging.ERROR, "safebeat"):
        run(scheduler, clock, 20)
    sent = windows_sent(drain(app, "q-quarantine"))
    other = sorted(datetime.fromisoformat(w) for e, w in sent if e == "other")
    assert [e for e, _ in sent if e == "victim"] == []
    assert max(sent.values()) == 1
    assert len(other) >= 19
    assert all((b - a).total_seconds() == 1 for a, b in itertools.pairwise(other))
    assert other[0] <= poisoned_at.replace(microsecond=0)
    said = [r.getMessage() for r in caplog.records if "cannot be read back" in r.getMessage()]
    assert len(said) == 1
    assert "'victim'" in said[0]
    assert "paused_until" in said[0] or "OverflowError" in said[0]

    assert store.set_paused("unit", "victim", Pause(False))  # the operator's way out
    run(scheduler, clock, 10)
    assert any(e == "victim" for e, _ in windows_sent(drain(app, "q-quarantine")))


def test_status_history_and_audit_keep_working_and_show_what_is_unreadable(
    store: SqliteStore, clock: FakeClock
) -> None:
    """`status` lists the unreadable entry as broken; `history` shows an unreadable row;
    `audit` shows a pause's record whose end is past 9999 in UTC, naming it unreadable."""
    app = make_app("q-quarantine", {"victim": {"task": "t.run", "schedule": 1.0}})
    scheduler = Scheduler(app, store=store, monotonic=clock.monotonic)
    run(scheduler, clock, 3)
    [row, *_] = store.history("unit", "victim")
    after_9999 = datetime.fromisoformat("9999-12-31T23:59:59-12:00")
    store.record_audit("unit", AuditEvent("old", AuditAction.PAUSE, "victim", (after_9999,)))
    pause_after_9999(store, "victim")
    with sqlite3.connect(store.path) as conn:
        conn.execute(
            "UPDATE safebeat_dispatch SET sent_at = ? WHERE id = ?", (AFTER_9999_US, row.id)
        )
    url = f"sqlite:///{store.path}"

    status = CliRunner().invoke(main, ["--url", url, "--namespace", "unit", "status", "--json"])
    assert status.exit_code == 0, status.output
    report = json.loads(status.output)
    [entry] = report["entries"]
    assert entry["unreadable"]
    assert [b["entry"] for b in report["broken"]] == ["victim"]
    table = CliRunner().invoke(main, ["--url", url, "--namespace", "unit", "status"])
    assert table.exit_code == 0, table.output
    assert "(unreadable)" in table.output

    history = CliRunner().invoke(main, ["--url", url, "--namespace", "unit", "history", "victim"])
    assert history.exit_code == 0, history.output
    assert "unreadable row" in history.output

    audit = CliRunner().invoke(main, ["--url", url, "--namespace", "unit", "audit"])
    assert audit.exit_code == 0, audit.output
    assert "unreadable: '9999-12-31T23:59:59-12:00'" in audit.output


def broken_gauge(scheduler: Scheduler) -> dict[str, float]:
    """safebeat_entry_broken as served: entry -> value."""
    return {
        sample.labels["entry"]: sample.value
        for family in scheduler.engine.metrics.registry.collect()
        if family.name == "safebeat_entry_broken"
        for sample in family.samples
    }


def test_an_unreadable_entry_is_served_as_broken_while_it_stays_unreadable(
    store: SqliteStore, clock: FakeClock
) -> None:
    """safebeat_entry_broken is 1 for the unreadable entry at every tick for as long as it
    cannot be read (the error counter moved once), and gone once it reads back."""
    app = make_app(
        "q-quarantine-gauge",
        {"victim": {"task": "t.run", "schedule": 1.0}, "other": {"task": "t.run", "schedule": 1.0}},
    )
    scheduler = Scheduler(app, store=store, monotonic=clock.monotonic)
    scheduler.engine.metrics.serve(0, address="127.0.0.1")
    run(scheduler, clock, 3)
    assert broken_gauge(scheduler) == {}
    pause_after_9999(store, "victim")
    run(scheduler, clock, 5)
    assert broken_gauge(scheduler) == {"victim": 1.0}
    run(scheduler, clock, 60)
    assert broken_gauge(scheduler) == {"victim": 1.0}
    assert scheduler.engine.metrics.totals.entry_errors == 1
    assert store.set_paused("unit", "victim", Pause(False))
    run(scheduler, clock, 5)
    assert broken_gauge(scheduler) == {}
    drain(app, "q-quarantine-gauge")
