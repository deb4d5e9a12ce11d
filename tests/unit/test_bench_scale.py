"""The scale benchmark's schedule (tests/benchmarks/scale_child.py): its burst is real.

The burst's figures mean something only if the first `due_count` entries have exactly one
window in the run, at the chosen instant, and the others none.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

import safebeat
from safebeat import windows
from safebeat.beat.message_template import publish_receivers
from safebeat.config import Config
from safebeat.entries import compile_schedule
from safebeat.stores import open_store
from tests.benchmarks.scale_child import (
    TASK_NAME,
    Sent,
    bench_app,
    bench_schedule,
    drive_until,
)

UTC = timezone.utc
DUE = datetime(2026, 12, 1, 21, 7, 43, tzinfo=UTC)


def decided(rule: windows.Rule, policy: windows.Policy, now: datetime) -> windows.Due:
    """What an entry registered a minute before the burst decides at `now`."""
    registered = DUE - timedelta(minutes=1)
    return windows.due(rule, after=registered, now=now, policy=policy, anchor=registered)


def test_the_due_entries_have_one_window_at_the_instant_and_the_rest_none() -> None:
    schedule = bench_schedule(5, 3, DUE.timestamp(), pulse=True)
    entries, broken = compile_schedule(schedule, app_timezone=UTC, config=Config())

    assert not broken
    assert next(iter(entries)) == "pulse"
    for name in ("bench-0000000", "bench-0000001", "bench-0000002"):
        entry = entries[name]
        assert decided(entry.rule, entry.policy, DUE - timedelta(seconds=1)).dispatch == ()
        assert decided(entry.rule, entry.policy, DUE).dispatch == (DUE,)
        assert decided(entry.rule, entry.policy, DUE + timedelta(minutes=58)).dispatch == (DUE,)
    for name in ("bench-0000003", "bench-0000004"):
        entry = entries[name]
        assert decided(entry.rule, entry.policy, DUE + timedelta(minutes=58)).dispatch == ()


@pytest.mark.parametrize("count", [0, 1, 4])
def test_entry_i_sends_i(count: int) -> None:
    schedule = bench_schedule(count, count, DUE.timestamp())

    assert [item["args"] for item in schedule.values()] == [(i,) for i in range(count)]


def test_the_replicas_count_what_they_send_without_a_publish_signal_receiver() -> None:
    """A receiver of Celery's publish signals makes safebeat have Celery build every
    message, so counting with one would time that path instead of the one a beat without
    receivers takes: `Sent` counts what the dispatcher reports sent instead."""
    config = {"broker": "memory://", "queue": "bench-sent", "store": "memory://bench-sent"}
    every_second = {"task": TASK_NAME, "schedule": timedelta(seconds=1)}
    app = bench_app(config, {f"bench-{i}": {**every_second, "args": (i,)} for i in range(3)})
    scheduler = safebeat.Scheduler(app, store=open_store(config["store"]))
    try:
        sent = Sent(scheduler)
        drive_until(scheduler, lambda: sent.count >= 3, time.time() + 30)

        assert sent.count == 3
        assert sent.first is not None
        assert sent.last is not None
        assert not publish_receivers()
    finally:
        scheduler.close()
