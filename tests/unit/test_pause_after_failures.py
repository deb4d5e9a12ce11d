"""`pause_after_failures`: the rule over an entry's history, the option and setting, the
header beat sets, and the worker hook pausing the entry on a memory store."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery

import safebeat.worker
from safebeat.beat.message_fields import message_for
from safebeat.config import load_config
from safebeat.entries import compile_entry
from safebeat.errors import ConfigError, EntryError
from safebeat.identity import format_window
from safebeat.record_rules import consecutive_failures
from safebeat.records import AuditAction, Claim, DispatchRecord, EntryState, Outcome, Pause, Status
from safebeat.stores.memory import MemoryStore
from safebeat.stores.protocols import Definition
from safebeat.worker.failures import AUDIT_ACTOR, pause_if_failing
from safebeat.worker.metrics import WorkerTotals
from tests.unit.test_worker import (  # noqa: F401 - fixtures used by name
    NAMESPACE,
    REPLICA,
    WINDOW,
    app,
    dispatch,
    fresh_counters,
    ran,
    store,
    task,
)

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


def record(minute: int, outcome: Outcome | None, *, reason: str | None = None) -> DispatchRecord:
    status = Status.SKIPPED if reason else Status.SENT
    return DispatchRecord(
        id=minute, entry="e", window=T0 + timedelta(minutes=minute), status=status,
        task_id=None, task_name=None, reason=reason, skipped_from=None, skipped_count=None,
        replica="r", host="h", pid=1, claimed_at=T0, sent_at=None, attempts=1, error=None,
        outcome=outcome,
    )  # fmt: skip


F, S, R = Outcome.FAILURE, Outcome.SUCCESS, Outcome.RETRY


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        ([], 0),
        ([record(1, F), record(2, F), record(3, F)], 3),
        ([record(1, F), record(2, S), record(3, F)], 1),
        ([record(3, F), record(1, F), record(2, F)], 3),  # any order: by window
        ([record(1, F), record(2, None), record(3, R), record(4, F)], 2),  # unfinished pass
        ([record(1, F), record(2, None, reason="late"), record(3, F)], 2),
        ([record(1, F), record(2, None, reason="paused"), record(3, F)], 1),
        ([record(1, S)], 0),
    ],
)
def test_consecutive_failures_count_back_from_the_newest_window(
    history: list[DispatchRecord], expected: int
) -> None:
    """Failures count back until a success or a paused window; unfinished runs and other
    skips are passed over."""
    assert consecutive_failures(history) == expected


def entry_with(options: dict[str, Any], **settings: Any) -> Any:
    config = load_config({f"safebeat_{k}": v for k, v in settings.items()}, environ={})
    raw = {"task": "t.run", "schedule": 60.0, "options": {"safebeat": options}}
    return compile_entry("e", raw, app_timezone=timezone.utc, config=config)


def test_the_option_wins_over_the_setting_and_off_turns_it_off() -> None:
    """An entry's pause_after_failures wins; without one, the setting's applies."""
    assert entry_with({}).pause_after_failures is None
    assert entry_with({}, pause_after_failures=5).pause_after_failures == 5
    assert entry_with({"pause_after_failures": 2}, pause_after_failures=5).pause_after_failures == 2
    assert (
        entry_with({"pause_after_failures": "off"}, pause_after_failures=5).pause_after_failures
        is None
    )


@pytest.mark.parametrize("value", [0, -1, 2.5, "3", True])
def test_a_bad_option_is_refused_naming_the_entry(value: object) -> None:
    """A threshold that is not a whole number of at least 1 is an EntryError for the entry."""
    with pytest.raises(EntryError, match="pause_after_failures"):
        entry_with({"pause_after_failures": value})


@pytest.mark.parametrize("value", [0, "many", -3])
def test_a_bad_setting_is_refused_naming_it(value: object) -> None:
    """safebeat_pause_after_failures must be a whole number of at least 1 (or off)."""
    with pytest.raises(ConfigError, match="safebeat_pause_after_failures"):
        load_config({"safebeat_pause_after_failures": value}, environ={})
    assert (
        load_config({"safebeat_pause_after_failures": "off"}, environ={}).pause_after_failures
        is None
    )


def test_the_threshold_travels_in_a_header_and_only_when_set() -> None:
    """Beat's message carries the entry's threshold for the worker hook; without one, no header."""
    claim = Claim(1, "e", T0, "id", 1)
    _, _, options = message_for(entry_with({"pause_after_failures": 3}), claim)
    assert options["headers"]["safebeat_pause_after_failures"] == 3
    _, _, plain = message_for(entry_with({}), claim)
    assert "safebeat_pause_after_failures" not in plain["headers"]


def test_the_digest_of_an_entry_without_the_option_is_unchanged() -> None:
    """Entries that do not set it keep their digest, so upgrading reports no change."""
    assert entry_with({}).digest == entry_with({"pause_after_failures": None}).digest


def fail(celery_task: Any, task_id: str, window: datetime, threshold: int | None) -> None:
    """Deliver `window` and let it fail, as a worker's tracer would."""
    headers = {"safebeat_entry": "weekly", "safebeat_window": format_window(window)}
    if threshold is not None:
        headers["safebeat_pause_after_failures"] = threshold
    celery_task.push_request(id=task_id, headers=headers, is_eager=False, hostname="w1@host")
    try:
        celery_task.before_start(task_id, (), {})
        safebeat.worker._on_postrun(task=celery_task, state="FAILURE")
    finally:
        celery_task.pop_request()


def test_the_worker_pauses_the_entry_after_the_threshold_of_failures(
    app: Celery,  # noqa: F811
    task: Any,  # noqa: F811
    fresh_counters: WorkerTotals,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The third failed run in a row pauses the entry for every replica, logs why and counts
    it; the first two do not."""
    store(app).register(NAMESPACE, [Definition("weekly", "every 7d", "d")], REPLICA)
    for week in range(3):
        assert not store(app).states(NAMESPACE)["weekly"].paused
        window = WINDOW + timedelta(days=7 * week)
        with caplog.at_level(logging.ERROR, "safebeat.worker"):
            fail(task, dispatch(app, window), window, threshold=3)
    assert store(app).states(NAMESPACE)["weekly"].paused
    assert fresh_counters.paused_after_failures == 1
    assert "entry 'weekly' paused after 3 failed runs in a row" in caplog.text
    assert "safebeat resume weekly" in caplog.text


def test_the_pause_after_failures_carries_its_reason_and_is_audited(
    app: Celery,  # noqa: F811
    task: Any,  # noqa: F811
    fresh_counters: WorkerTotals,  # noqa: F811
) -> None:
    """The pause the hook makes has a note saying why, and the audit trail shows it once,
    under the actor `safebeat (pause_after_failures)`."""
    store(app).register(NAMESPACE, [Definition("weekly", "every 7d", "d")], REPLICA)
    for week in range(2):
        window = WINDOW + timedelta(days=7 * week)
        fail(task, dispatch(app, window), window, threshold=2)
    state = store(app).states(NAMESPACE)["weekly"]
    assert state.pause_note == "2 failed runs in a row (pause_after_failures=2)"
    [line] = store(app).audit(NAMESPACE, "weekly")
    assert (line.actor, line.action) == (AUDIT_ACTOR, AuditAction.PAUSE)
    assert line.note == state.pause_note
    assert AUDIT_ACTOR == "safebeat (pause_after_failures)"


def test_without_the_header_or_below_the_threshold_nothing_is_paused(
    app: Celery,  # noqa: F811
    task: Any,  # noqa: F811
    fresh_counters: WorkerTotals,  # noqa: F811
) -> None:
    """Failures of an entry without pause_after_failures, or fewer than its threshold in a
    row, leave it running."""
    store(app).register(NAMESPACE, [Definition("weekly", "every 7d", "d")], REPLICA)
    for week, threshold in enumerate([None, None, 5, 5]):
        window = WINDOW + timedelta(days=7 * week)
        fail(task, dispatch(app, window), window, threshold=threshold)
    assert not store(app).states(NAMESPACE)["weekly"].paused
    assert fresh_counters.paused_after_failures == 0


class FailingEntryStore(MemoryStore):
    """A memory store whose history is three failed runs, and which refuses to read every
    entry's state at once."""

    def history(
        self, namespace: str, entry: str | None = None, limit: int = 100
    ) -> list[DispatchRecord]:
        return [record(minute, F) for minute in (3, 2, 1)]

    def states(self, namespace: str) -> dict[str, EntryState]:
        raise AssertionError("read the state of every entry to check one")


def test_the_pause_check_reads_the_state_of_its_entry_only() -> None:
    """Checking whether a failing entry is paused already reads that entry's state, not
    the states of every entry of the namespace (100,000 of them, for each failed run)."""
    store = FailingEntryStore()
    names = ["weekly", *(f"other-{n}" for n in range(50))]
    store.register(NAMESPACE, [Definition(name, "every 7d", "d") for name in names], REPLICA)
    assert store.set_paused(NAMESPACE, "weekly", Pause(True, note="by hand"))
    assert not pause_if_failing(store, NAMESPACE, "weekly", 3)  # paused already
    assert store.set_paused(NAMESPACE, "weekly", Pause(False))
    assert pause_if_failing(store, NAMESPACE, "weekly", 3)
    state = store.state(NAMESPACE, "weekly")
    assert state is not None
    assert state.paused
