"""How soon a dead worker's window runs again: beat's take-over pass and the lease renewer's
rounds, paced on a fake clock."""

from __future__ import annotations

from datetime import timedelta

import pytest

from safebeat.beat.pacing import takeover_period
from safebeat.identity import Replica, task_id_for
from safebeat.records import LeasedRun, Start
from safebeat.stores.memory import MemoryStore
from safebeat.stores.protocols import NewClaim, TickPlan
from safebeat.testing import FakeClock, memory_scheduler
from safebeat.worker.leases import next_round, renewal_period
from tests.unit.test_scheduler import drain, make_app, run

S = timedelta(seconds=1)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_a_dead_run_is_republished_within_a_fifth_of_the_lease_whatever_the_claim_timeout(
    clock: FakeClock,
) -> None:
    """Beat's take-over pass runs every fifth of the execution lease when that is sooner
    than half the claim timeout: a window whose worker died is re-published about one
    lease after its last renewal, not up to half a claim timeout later."""
    queue = "recovery-pacing"
    app = make_app(
        queue,
        {"a": {"task": "t.run", "schedule": 3600.0}},
        safebeat_claim_timeout=60,
        safebeat_execution_lease=10,
    )
    store = MemoryStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    scheduler.tick()  # registers "a" and runs a take-over pass
    window = store.states("unit")["a"].anchor - timedelta(hours=1)
    task_id = task_id_for("unit", "a", window)
    claim = NewClaim("a", window, task_id, "t.run")
    result = store.tick(
        "unit", [], lambda now, s: TickPlan(claims=[claim]), replica=Replica("gone", 1, "g0")
    )
    assert result is not None
    store.record_publish("unit", [result.claimed[0].id], {})
    run_ = LeasedRun("a", window, "killed@host:1", 0)
    assert store.start_execution("unit", run_, lease=10 * S) is Start.RUN  # then SIGKILLed
    drain(app, queue)
    run(scheduler, clock, 9.5)
    assert drain(app, queue) == []  # its lease is alive: nothing is taken over
    run(scheduler, clock, 2.5)  # the lease lapsed at 10 s; a pass comes within 2 s
    [copy] = drain(app, queue)
    assert copy["id"] == task_id


def test_the_takeover_pass_comes_every_half_claim_timeout_or_fifth_of_the_lease() -> None:
    assert takeover_period(30 * S, 10 * S) == 2.0
    assert takeover_period(2 * S, 30 * S) == 1.0
    assert takeover_period(30 * S, 300 * S) == 15.0


def test_renewal_rounds_keep_their_rate_so_a_blocked_renewal_leaves_time_for_the_next() -> None:
    """A round that waited on a row lock for 5 s (`safebeat_lock_timeout`) and failed, with
    a 10 s lease renewed every 3.3 s: the next round starts at once, inside the lease, not
    3.3 s after the failure (which would be after the lease lapsed)."""
    interval = renewal_period(10 * S).total_seconds()
    due = 100.0 + interval  # the last renewal got through at 100.0
    failed_at = due + 5.0
    retry = next_round(due, failed_at, interval)
    assert retry == failed_at
    assert retry < 110.0
    assert next_round(due, due + 0.01, interval) == pytest.approx(due + interval)
