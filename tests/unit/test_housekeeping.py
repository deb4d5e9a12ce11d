"""`safebeat.beat.housekeeping`: the views of the entries it hands the store instead of copies,
and the pace of its prune passes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from safebeat.beat.housekeeping import (
    BACKLOG_PRUNE_INTERVAL,
    PRUNE_BUDGET,
    Definitions,
    Digests,
    Housekeeper,
)
from safebeat.beat.metrics import BeatMetrics
from safebeat.beat.probes import ProbeState
from safebeat.config import Config
from safebeat.entries import Entry, compile_schedule
from safebeat.identity import Replica
from safebeat.stores.memory import MemoryStore
from safebeat.testing import FakeClock

REPLICA = Replica("house-host", 1, "h00000")


def entries() -> dict[str, Entry]:
    compiled, broken = compile_schedule(
        {f"e{i}": {"task": "t.run", "schedule": 60 + i} for i in range(5)},
        app_timezone=timezone.utc,
        config=Config(namespace="house"),
    )
    assert not broken
    return compiled


def test_definitions_read_as_the_list_of_every_entrys_definition() -> None:
    compiled = entries()
    listed = [entry.definition for entry in compiled.values()]
    view = Definitions(list(compiled.values()))
    assert len(view) == len(listed)
    assert list(view) == listed
    assert [view[i] for i in range(len(view))] == listed
    assert view[-1] == listed[-1]
    assert view[1:3] == listed[1:3]
    assert view[4:100] == listed[4:100]


def test_digests_read_as_a_dict_of_every_entrys_digest() -> None:
    compiled = entries()
    digests = {name: entry.digest for name, entry in compiled.items()}
    view = Digests(compiled)
    assert dict(view) == digests
    assert view == digests
    assert view == Digests(entries())  # equal entries compiled again
    assert len(view) == 5
    assert "e9" not in view


class SlowPruneStore(MemoryStore):
    """A memory store whose prune takes `seconds` of `clock`, and records its budgets."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        super().__init__(clock=clock.now)
        self.fake_clock, self.seconds = clock, seconds
        self.budgets: list[timedelta | None] = []

    def prune(self, namespace: str, before: datetime, *, budget: timedelta | None = None) -> int:
        self.budgets.append(budget)
        self.fake_clock.advance(self.seconds)
        return super().prune(namespace, before, budget=budget)


def housekeeper(store: SlowPruneStore, clock: FakeClock) -> Housekeeper:
    config = Config(namespace="house")
    metrics = BeatMetrics("house", "replica", "memory://")
    probes = ProbeState(monotonic=clock.monotonic, liveness_timeout=90)
    return Housekeeper(lambda: store, config, REPLICA, metrics, probes, monotonic=clock.monotonic)


def run_due(keeper: Housekeeper, clock: FakeClock) -> None:
    keeper.run_due(clock.monotonic(), clock.now(), {}, heartbeat_interval=3600, prune_interval=3600)


def test_a_prune_pass_has_a_budget_and_comes_back_soon_while_a_backlog_is_left() -> None:
    """Beat prunes with PRUNE_BUDGET; a pass that spent it all left a backlog, so the next
    one comes BACKLOG_PRUNE_INTERVAL later, not a prune interval later."""
    clock = FakeClock()
    store = SlowPruneStore(clock, PRUNE_BUDGET.total_seconds())
    keeper = housekeeper(store, clock)
    run_due(keeper, clock)
    assert store.budgets == [PRUNE_BUDGET]
    assert keeper.next_prune == clock.monotonic() + BACKLOG_PRUNE_INTERVAL


def test_a_prune_pass_within_its_budget_waits_the_prune_interval() -> None:
    """A pass that ended before its budget deleted everything due: the next in an hour."""
    clock = FakeClock()
    store = SlowPruneStore(clock, PRUNE_BUDGET.total_seconds() / 10)
    keeper = housekeeper(store, clock)
    run_due(keeper, clock)
    assert keeper.next_prune == clock.monotonic() + 3600
