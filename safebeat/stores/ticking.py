"""The tick sequence, written once for the stores that run it step by step.

In one transaction that holds the namespace's tick lock: read the store's clock, load
the states of the due entries, call the planner, insert the claims and skips under the
unique key, advance the states, take over stale claims (on the periodic pass), commit.
The memory, SQLite and Django ORM stores give `SteppedTick` their transaction and
steps; PostgreSQL and Redis run the same sequence in two server round trips each
(`postgres.tick._tick`, Redis's `begin_tick` and `finish_tick` scripts).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from safebeat.identity import Replica
from safebeat.records import (
    Claim,
    EntryState,
    Planner,
    Reclaim,
    TickPlan,
    TickResult,
    states_after,
)


class TickLockBusy(Exception):
    """Another replica holds the namespace's tick lock: this tick writes nothing."""


@dataclass(frozen=True)
class TickSteps:
    """One backend's steps inside its tick transaction, at the store's `now`."""

    now: datetime
    load: Callable[[Collection[str]], Mapping[str, EntryState]]
    insert: Callable[[TickPlan], list[Claim]]  # returns the claims this call inserted
    advance: Callable[[Mapping[str, datetime]], None]  # the later window wins
    reclaim: Callable[[Reclaim], list[Claim]]


class _SteppedStore(Protocol):
    def _tick_transaction(
        self, namespace: str, replica: Replica
    ) -> AbstractContextManager[TickSteps]:
        """Open the tick's transaction with the tick lock held (raise TickLockBusy if
        another replica holds it) and yield its steps; commit when the block ends."""
        ...


class SteppedTick:
    """`TickStore.tick` for a store that provides `_tick_transaction`."""

    def tick(
        self: _SteppedStore,
        namespace: str,
        names: Collection[str],
        planner: Planner,
        *,
        replica: Replica,
        reclaim: Reclaim | None = None,
    ) -> TickResult | None:
        try:
            with self._tick_transaction(namespace, replica) as steps:
                states = steps.load(names)
                plan = planner(steps.now, states)
                claimed = steps.insert(plan)
                steps.advance(plan.advances)
                reclaimed = [] if reclaim is None else steps.reclaim(reclaim)
        except TickLockBusy:
            return None
        return TickResult(steps.now, states_after(states, plan), claimed, reclaimed, plan)
