"""`overlap="skip_if_queued"`: the rule on its own, its settings, and beat ticking on a fake
clock while no worker takes its windows."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from safebeat.beat.planning import queue_timeouts
from safebeat.config import load_config
from safebeat.entries import Entry, compile_entry
from safebeat.records import LeasedRun
from safebeat.stores.protocols import Status
from safebeat.testing import FakeClock, memory_scheduler
from safebeat.windows import Due, Overlap, SkippedSpan, SkipReason, skip_if_queued
from tests.unit.test_scheduler import drain, make_app, windows_sent

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
S = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)


@pytest.fixture
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


def due(*dispatch: datetime) -> Due:
    return Due(dispatch, (), dispatch[-1] + MINUTE if dispatch else None)


def test_a_queued_previous_window_blocks_every_due_window() -> None:
    """While the previous window waits in the queue, due windows are skipped as queued."""
    decided = skip_if_queued(
        due(T0, T0 + MINUTE), queued_since=T0 - 10 * S, now=T0 + MINUTE, timeout=5 * MINUTE
    )
    assert decided.dispatch == ()
    assert decided.skipped == (SkippedSpan(T0, T0 + MINUTE, 2, SkipReason.QUEUED),)
    assert decided.last_window == T0 + MINUTE


def test_with_nothing_queued_only_the_newest_window_is_dispatched() -> None:
    """Nothing waiting: the newest window goes out; older ones would only queue behind it."""
    decided = skip_if_queued(due(T0, T0 + MINUTE), queued_since=None, now=T0, timeout=MINUTE)
    assert decided.dispatch == (T0 + MINUTE,)
    assert decided.skipped == (SkippedSpan(T0, T0, 1, SkipReason.QUEUED),)
    single = due(T0)
    assert skip_if_queued(single, queued_since=None, now=T0, timeout=MINUTE) == single


def test_a_window_queued_longer_than_the_timeout_blocks_nothing() -> None:
    """A window that waited longer than the timeout is presumed lost: the next one goes out."""
    decided = skip_if_queued(due(T0), queued_since=T0 - MINUTE, now=T0, timeout=MINUTE)
    assert decided.dispatch == (T0,)


def test_the_policy_is_an_option_and_a_setting() -> None:
    """skip_if_queued is accepted per entry and as safebeat_overlap."""
    config = load_config({"safebeat_overlap": "skip_if_queued"}, environ={})
    assert config.overlap is Overlap.SKIP_IF_QUEUED
    raw = {"task": "t", "schedule": 5.0, "options": {"safebeat": {"overlap": "skip_if_queued"}}}
    entry = compile_entry("e", raw, app_timezone=timezone.utc, config=load_config({}, environ={}))
    assert entry.overlap is Overlap.SKIP_IF_QUEUED


def test_the_queue_timeout_is_the_entrys_expires_else_the_setting() -> None:
    """A message that expires is dropped by the worker: after expires, it blocks nothing."""
    config = load_config({"safebeat_overlap_timeout": "10m"}, environ={})

    def entry(options: dict[str, object]) -> Entry:
        policy = {"overlap": "skip_if_queued"}
        raw = {"task": "t", "schedule": 5.0, "options": {**options, "safebeat": policy}}
        return compile_entry("e", raw, app_timezone=timezone.utc, config=config)

    assert queue_timeouts(config.overlap_timeout, {"e": entry({"expires": 90})}) == {"e": 90 * S}
    assert queue_timeouts(config.overlap_timeout, {"e": entry({})}) == {"e": 10 * MINUTE}


def test_beat_sends_nothing_more_while_no_worker_takes_the_window(queue: str) -> None:
    """Windows due while the last one is still queued are skipped as queued; once a worker
    starts it, the next window is sent again."""
    clock = FakeClock(T0)
    app = make_app(
        queue,
        {
            "sync": {
                "task": "t.sync",
                "schedule": 10.0,
                "options": {"safebeat": {"overlap": "skip_if_queued"}},
            }
        },
    )
    scheduler = memory_scheduler(app, clock)
    store = scheduler.store

    def tick_at(seconds: int) -> list[tuple[str, str]]:
        clock.set(T0 + seconds * S)
        scheduler.tick()
        return sorted(windows_sent(drain(app, queue)))

    assert tick_at(0) == []
    assert tick_at(10) == [("sync", "2026-03-01T12:00:10Z")]
    assert tick_at(20) == []  # the 12:00:10 message still waits for a worker
    assert tick_at(30) == []
    store.start_execution("unit", LeasedRun("sync", T0 + 10 * S, "w1@host:1", 0), lease=MINUTE)
    assert tick_at(40) == [("sync", "2026-03-01T12:00:40Z")]
    skipped = [r for r in store.history("unit", "sync") if r.status is Status.SKIPPED]
    assert {r.reason for r in skipped} == {"queued"}
    assert sorted(r.window for r in skipped) == [T0 + 20 * S, T0 + 30 * S]
