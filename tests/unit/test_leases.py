"""The worker's lease renewer: what it renews, in how many calls, and that failures pass."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from safebeat.config import Config
from safebeat.errors import StoreUnavailable
from safebeat.identity import Replica, task_id_for
from safebeat.records import LeasedRun, NewClaim, Outcome, RunEnd, Start, TickPlan
from safebeat.stores.memory import MemoryStore
from safebeat.testing import FakeClock
from safebeat.worker.leases import LeaseRenewer
from safebeat.worker.metrics import WorkerTotals

T0 = datetime(2026, 3, 2, 6, 0, tzinfo=timezone.utc)
S = timedelta(seconds=1)
LEASE = timedelta(seconds=30)
CONFIG = Config(namespace="unit", execution_lease=LEASE)


def started(store: MemoryStore, window: datetime, worker: str) -> LeasedRun:
    """Claim `window` of entry "e" and record its start by `worker`; return the run."""
    claim = NewClaim("e", window, task_id_for("unit", "e", window), "t")
    store.tick("unit", [], lambda n, s: TickPlan(claims=[claim]), replica=Replica("h", 1, "r"))
    run = LeasedRun("e", window, worker, 0)
    assert store.start_execution("unit", run, lease=LEASE) is Start.RUN
    return run


def lease_of(store: MemoryStore, window: datetime) -> datetime | None:
    [record] = [r for r in store.history("unit", "e") if r.window == window]
    return record.lease_until


class CountingStore(MemoryStore):
    """A memory store that counts `renew_executions` calls."""

    calls = 0

    def renew_executions(self, *args: object, **kwargs: object) -> int:
        self.calls += 1
        return super().renew_executions(*args, **kwargs)  # type: ignore[arg-type]


def test_every_held_run_is_renewed_in_one_call_and_released_runs_are_not() -> None:
    """One round renews all held runs of a store in one call, to store now + lease; a
    released run is left to lapse."""
    clock = FakeClock(T0)
    store = CountingStore(clock=clock.now)
    renewer = LeaseRenewer(store=lambda config: store)
    first, second = started(store, T0, "w@h:1"), started(store, T0 + LEASE, "w@h:1")
    token = renewer.hold(CONFIG, first)
    renewer.hold(CONFIG, second)
    clock.advance(20)
    assert renewer.renew_now() == 2
    assert store.calls == 1
    assert lease_of(store, T0) == lease_of(store, T0 + LEASE) == T0 + 20 * S + LEASE
    renewer.release(token)
    clock.advance(20)
    assert renewer.renew_now() == 1
    assert lease_of(store, T0) == T0 + 20 * S + LEASE
    assert renewer.held() == [second]


def test_a_run_taken_over_by_another_worker_is_not_renewed() -> None:
    """A renewal only extends the lease of the worker that still holds the run."""
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock.now)
    renewer = LeaseRenewer(store=lambda config: store)
    run = started(store, T0, "old@h:1")
    renewer.hold(CONFIG, run)
    clock.advance(31)
    taken = store.start_execution("unit", LeasedRun("e", T0, "new@h:2", 0), lease=LEASE)
    assert taken is Start.TAKEOVER
    assert renewer.renew_now() == 0
    assert lease_of(store, T0) == T0 + 31 * S + LEASE


def test_a_renewal_that_updates_fewer_runs_than_held_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A run whose lease was lost (taken over after it lapsed) is not renewed, and the
    round says so in the log instead of passing silently."""
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock.now)
    renewer = LeaseRenewer(store=lambda config: store)
    run = started(store, T0, "old@h:1")
    renewer.hold(CONFIG, run)
    clock.advance(31)
    store.start_execution("unit", LeasedRun("e", T0, "new@h:2", 0), lease=LEASE)
    with caplog.at_level("WARNING", logger="safebeat.worker"):
        assert renewer.renew_now() == 0
    assert "1 of 1 run(s) of this process no longer hold their lease" in caplog.text


class EndingStore(MemoryStore):
    """A memory store on which a held run ends (recorded and released) while a renewal is
    on its way to the store, as a pool process's task thread does beside the renewer."""

    ending: tuple[LeaseRenewer, int, LeasedRun] | None = None

    def renew_executions(self, *args: object, **kwargs: object) -> int:
        if self.ending is not None:
            renewer, token, run = self.ending
            self.finish_execution("unit", run, RunEnd(Outcome.SUCCESS, timedelta(seconds=1)))
            renewer.release(token)
            self.ending = None
        return super().renew_executions(*args, **kwargs)  # type: ignore[arg-type]


def test_a_run_that_ends_while_its_renewal_is_on_its_way_is_no_lost_lease(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A run recorded finished between the renewer reading its held runs and the store
    renewing them is not reported as a lease lost: only runs still held count."""
    clock = FakeClock(T0)
    store = EndingStore(clock=clock.now)
    renewer = LeaseRenewer(store=lambda config: store)
    run = started(store, T0, "w@h:1")
    store.ending = (renewer, renewer.hold(CONFIG, run), run)
    with caplog.at_level("WARNING", logger="safebeat.worker"):
        assert renewer.renew_now() == 0
    assert "no longer hold their lease" not in caplog.text
    assert renewer.held() == []


def test_a_store_error_while_renewing_is_counted_and_never_raised(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A store that is down costs the round, not the task: logged, counted, no exception."""
    totals = WorkerTotals()
    monkeypatch.setattr("safebeat.worker.leases.worker_metrics.totals", totals)

    class DownStore(MemoryStore):
        def renew_executions(self, *args: object, **kwargs: object) -> int:
            raise StoreUnavailable("store down")

    renewer = LeaseRenewer(store=lambda config: DownStore())
    renewer.hold(CONFIG, LeasedRun("e", T0, "w@h:1", 0))
    assert renewer.renew_now() == 0
    assert totals.renewal_errors == 1
    assert "renewing the leases of 1 run(s) failed (store down)" in caplog.text


def test_a_run_taken_over_in_its_own_process_is_no_longer_held() -> None:
    """A run whose lease lapsed (a stall, a clock jump) taken over by a start of the same
    run in the same process (same worker, same retries): the earlier one is no longer
    held, so its pending end (retried by the renewer) never lands on the new run's row
    (found by the simulation, seed 758)."""
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock.now)
    renewer = LeaseRenewer(store=lambda config: store)
    run = started(store, T0, "w@h:1")
    stale = renewer.hold(CONFIG, run)
    renewer.finish_later(stale, RunEnd(Outcome.RETRY, S))  # its end failed to record
    clock.advance(31)
    assert store.start_execution("unit", run, lease=LEASE) is Start.TAKEOVER
    fresh = renewer.hold(CONFIG, run)
    assert renewer.renew_now() == 1
    [record] = store.history("unit", "e")
    assert (record.finished_at, record.outcome) == (None, None)
    assert not renewer.holds(stale)
    assert renewer.holds(fresh)
