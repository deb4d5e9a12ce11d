"""The Store protocol: what every backend guarantees to the scheduler, and the records it keeps.

A store holds only schedule state, claims and history; Celery owns tasks and results.
Several replicas share one store. The guarantees below are what make "each window is
dispatched once" true, and the contract suite (`tests/integration/test_store_contract.py`)
checks them against every backend.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Protocol

from safebeat.identity import Replica


class Status(str, enum.Enum):
    """Where a dispatch row stands."""

    CLAIMED = "claimed"  # claim committed, publish not confirmed yet
    SENT = "sent"  # published to the broker
    FAILED = "failed"  # publishing failed for a reason retrying cannot fix (recorded error)
    SKIPPED = "skipped"  # not dispatched, by policy (reason says which)


@dataclass(frozen=True)
class Definition:
    """What one replica believes an entry is: its schedule text and a digest of everything."""

    name: str
    schedule: str
    digest: str


@dataclass(frozen=True)
class EntryState:
    """The shared state of one entry, the same for every replica.

    `anchor` is the origin of interval windows, fixed at first registration.
    `defined_at` is when the current definition was registered: windows at or before it
    are never dispatched, so a start or a changed definition fires nothing as a surprise.
    `last_window` is the newest window decided (claimed or skipped) by any replica.
    `schedule` and `digest` are the definition last registered (see Store.register).
    """

    name: str
    anchor: datetime
    defined_at: datetime
    last_window: datetime | None
    digest: str
    schedule: str

    @property
    def decided_until(self) -> datetime:
        """Windows at or before this instant are already decided."""
        if self.last_window is None or self.last_window < self.defined_at:
            return self.defined_at
        return self.last_window


@dataclass(frozen=True)
class NewClaim:
    """A window this replica wants to dispatch."""

    entry: str
    window: datetime
    task_id: str
    task_name: str


@dataclass(frozen=True)
class NewSkip:
    """Windows `[first, window]` of an entry not dispatched, for `reason`; keyed by `window`."""

    entry: str
    window: datetime
    first: datetime
    count: int | None
    reason: str


@dataclass(frozen=True)
class TickPlan:
    """What the planner decided under the tick lock."""

    claims: Sequence[NewClaim] = ()
    skips: Sequence[NewSkip] = ()
    advances: Mapping[str, datetime] = field(default_factory=dict)


@dataclass(frozen=True)
class Reclaim:
    """Ask a tick to take over claims of `entries` left unsent for longer than `timeout`."""

    entries: Collection[str]
    timeout: timedelta
    limit: int = 1000


@dataclass(frozen=True)
class Claim:
    """A claimed window this replica now owes a publish for."""

    id: int
    entry: str
    window: datetime
    task_id: str
    attempts: int


@dataclass(frozen=True)
class TickResult:
    """The outcome of one locked tick."""

    now: datetime
    states: Mapping[str, EntryState]
    claimed: Sequence[Claim]
    reclaimed: Sequence[Claim]


@dataclass(frozen=True)
class Registration:
    """The shared states after registering, and the entries whose definition changed."""

    states: Mapping[str, EntryState]
    changed: Mapping[str, str]  # entry -> digest it had before this replica's definition


@dataclass(frozen=True)
class DispatchRecord:
    """One row of dispatch history."""

    id: int
    entry: str
    window: datetime
    status: Status
    task_id: str | None
    task_name: str | None
    reason: str | None
    skipped_from: datetime | None
    skipped_count: int | None
    replica: str
    host: str
    pid: int
    claimed_at: datetime
    sent_at: datetime | None
    attempts: int
    error: str | None


@dataclass(frozen=True)
class ReplicaRecord:
    """A replica's last heartbeat."""

    replica: str
    host: str
    pid: int
    version: str
    started_at: datetime
    heartbeat_at: datetime
    definitions: Mapping[str, str]  # entry -> digest this replica runs


Planner = Callable[[datetime, Mapping[str, EntryState]], TickPlan]


def system_clock() -> datetime:
    """This host's clock, aware UTC: "now" for stores without a server clock."""
    return datetime.now(timezone.utc)


class Store(Protocol):
    """The contract between the scheduler and a backend. Every method is synchronous.

    Methods raise `StoreUnavailable` when the backend cannot be reached (callers retry
    with backoff) and `StoreError` for anything retrying will not fix; driver exceptions
    never escape, and messages never contain a password.
    """

    #: The store's URL with any password replaced by `***`, for banners and logs.
    display_url: str

    def migrate(self) -> int:
        """Bring the schema to this version of safebeat; return the schema version.

        Safe to call from many replicas at once: one applies, the others wait and see
        the result.
        """
        ...

    def clock(self) -> datetime:
        """Return the store's "now" as an aware UTC datetime (the same clock for all replicas)."""
        ...

    def register(
        self, namespace: str, definitions: Sequence[Definition], replica: Replica
    ) -> Registration:
        """Record this replica's entry definitions without clobbering shared state.

        A new entry gets `anchor` = store now truncated to the second and `defined_at` =
        store now. An entry whose digest differs from the stored one gets the new
        definition and is listed in `changed`; only if its *schedule* text changed too
        does `defined_at` become store now (arguments or options do not move windows).
        Its anchor and `last_window` are always kept. An unchanged entry is left as it is.
        """
        ...

    def states(self, namespace: str) -> dict[str, EntryState]:
        """Return the shared state of every registered entry of `namespace`."""
        ...

    def tick(
        self,
        namespace: str,
        names: Collection[str],
        planner: Planner,
        *,
        replica: Replica,
        reclaim: Reclaim | None = None,
    ) -> TickResult | None:
        """Run one tick under the namespace's tick lock; return None if the lock is busy.

        In one transaction: take the lock without waiting long, read the store clock, load
        the states of `names`, call `planner(now, states)`, then
        - insert a dispatch row per claim and per skip, under the unique key
          (namespace, entry, window); a row that already exists is left alone and the
          claim is simply not returned (someone else has it): never an error;
        - set `last_window` to the later of the stored value and each advance;
        - if `reclaim` is given, take over for `replica` up to `reclaim.limit` rows of
          `reclaim.entries` that stayed `claimed` for longer than `reclaim.timeout`,
          oldest first (their `attempts` grows by one and `claimed_at` becomes now, so no
          other replica takes them too);
        and commit. Only committed claims are returned. The lock saves work; correctness
        comes from the unique key alone, so a lost lock cannot produce a second claim.
        """
        ...

    def record_publish(
        self, namespace: str, sent: Sequence[int], failed: Mapping[int, str]
    ) -> None:
        """Mark claims as sent (at store now), or as failed with an error that retrying
        cannot fix. A row that is no longer `claimed` is left as it is."""
        ...

    def heartbeat(
        self, namespace: str, replica: Replica, version: str, definitions: Mapping[str, str]
    ) -> None:
        """Record that `replica` is alive now, with the entry digests it runs."""
        ...

    def replicas(self, namespace: str) -> list[ReplicaRecord]:
        """Return every replica's last heartbeat, newest first."""
        ...

    def history(
        self, namespace: str, entry: str | None = None, limit: int = 100
    ) -> list[DispatchRecord]:
        """Return dispatch rows, newest window first, optionally of one entry."""
        ...

    def prune(self, namespace: str, before: datetime) -> int:
        """Delete dispatch rows claimed before `before` and replicas silent since then."""
        ...

    def close(self) -> None:
        """Release connections; the store reconnects if used again."""
        ...
