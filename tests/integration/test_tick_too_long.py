"""A tick the store ends for outlasting the lock timeout: beat claims fewer entries per tick.

On real PostgreSQL, with `safebeat_lock_timeout = 2s` and a planner slowed down (the
injected step sleeps; the test body does not): a tick of every due entry outlasts the
lock timeout and the server ends its session; beat says so, halves its batch and
dispatches every entry in smaller ticks, where it used to retry the same tick for ever.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import pytest
import redis

from safebeat import Scheduler
from safebeat.beat.due_times import DueTimes
from safebeat.beat.planning import Planned
from safebeat.records import EntryState, Status
from safebeat.stores.postgres import PostgresStore
from tests import runscope
from tests.integration.beat import make_app, run

pytestmark = pytest.mark.postgres

ENTRIES = 24
LOCK_TIMEOUT = 2.0
#: How long planning takes: for more than half the entries, well past the lock timeout;
#: for half or fewer, past a quarter of it (so the batch does not grow back, see
#: `safebeat.beat.batching`) with 1.4 s to spare for the round trips on a loaded machine.
SLOW_PLAN_SECONDS = 3.0
PLAN_SECONDS = 0.6


class SlowPlanner(Scheduler):
    """A scheduler whose planner is slow past a size, like counting a long backlog."""

    claim_batch = ENTRIES
    min_claim_batch = 3
    slow = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        plan = self.engine.plan

        def slow_plan(now: datetime, states: Mapping[str, EntryState]) -> Planned:
            if self.slow:  # the controlled slow step
                time.sleep(SLOW_PLAN_SECONDS if len(states) > ENTRIES // 2 else PLAN_SECONDS)
            return plan(now, states)

        self.engine.plan = slow_plan  # type: ignore[method-assign]


def test_a_tick_the_store_ended_shrinks_the_batch_and_every_entry_is_dispatched(
    pg_url: str, redis_url: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The killed tick is logged as longer than safebeat_lock_timeout with the smaller
    batch (not "store unreachable"), its skipped windows are not reported (it committed
    nothing), and the smaller ticks that follow dispatch every entry's latest window."""
    queue = runscope.unique("toolong")
    app = make_app(redis_url, queue, pg_url, namespace, safebeat_lock_timeout=LOCK_TIMEOUT)
    app.conf.beat_schedule = {
        f"e{i:02d}": {"task": "faults.tick", "schedule": 0.2} for i in range(ENTRIES)
    }
    scheduler = SlowPlanner(app)
    caplog.set_level(logging.INFO, logger="safebeat")
    try:
        scheduler.tick()  # registers every entry
        scheduler.engine.pacing.due_at = DueTimes(dict.fromkeys(scheduler.entries, math.inf))
        run(scheduler, 1.2)  # beat idles while windows pass: a backlog of ~6 per entry
        scheduler.slow = True
        scheduler.engine.pacing.due_at = DueTimes(dict.fromkeys(scheduler.entries, 0.0))  # all due
        for _ in range(6):
            scheduler.tick()
            earliest = scheduler.engine.pacing.due_at.earliest()
            if earliest is None or earliest > time.monotonic():
                break
        store = PostgresStore(pg_url)
        history = store.history(namespace, limit=10_000)
        store.close()
    finally:
        scheduler.close()
        redis.Redis.from_url(redis_url).delete(queue)
    messages = [r.getMessage() for r in caplog.records]
    [first_too_long] = [
        i for i, m in enumerate(messages) if "tick took longer than safebeat_lock_timeout" in m
    ]
    assert f"{ENTRIES} entries" in messages[first_too_long]
    assert f"claiming fewer entries per tick ({ENTRIES // 2})" in messages[first_too_long]
    assert not [m for m in messages if "store unreachable" in m]
    assert not [m for m in messages[:first_too_long] if "skipped windows" in m]
    assert [m for m in messages[first_too_long:] if "skipped windows" in m]
    assert scheduler.metrics.totals.store_errors == 1
    sent = {r.entry for r in history if r.status is Status.SENT}
    assert sent == set(scheduler.entries)
