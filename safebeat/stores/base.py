"""The Store protocol: what every backend guarantees to the scheduler, and the records it keeps.

A store holds only schedule state, claims, their history (including what the worker hook
recorded about each execution) and effect keys; Celery owns tasks and results.
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


class Outcome(str, enum.Enum):
    """How one execution of a window ended, as the worker hook saw it."""

    SUCCESS = "success"
    FAILURE = "failure"
    RETRY = "retry"  # the task asked Celery to retry; a later retry of the window may run


class Start(str, enum.Enum):
    """The answer of `Store.start_execution`: may this delivery of a window run?"""

    RUN = "run"  # first start, or a Celery retry of the window: run the body
    TAKEOVER = "takeover"  # the previous run never finished and is presumed lost: run the body
    DUPLICATE = "duplicate"  # already started (and not presumed lost) or finished: skip the body
    UNKNOWN = "unknown"  # no dispatched window with this key: run the body, untracked


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
    `running_since` is the start of the entry's newest execution that started and has not
    finished (see Store.start_execution), or None: what `overlap="forbid"` looks at.
    `paused` is set by Store.set_paused: the scheduler skips the windows of a paused entry.
    """

    name: str
    anchor: datetime
    defined_at: datetime
    last_window: datetime | None
    digest: str
    schedule: str
    running_since: datetime | None = None
    paused: bool = False

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
    # Execution, as recorded by the worker hook (safebeat.worker):
    started_at: datetime | None = None  # store time the latest execution started
    finished_at: datetime | None = None  # store time it ended (None: running, or lost)
    outcome: Outcome | None = None
    runtime: timedelta | None = None  # as measured by the worker
    worker: str | None = None  # `nodename:pid` of the process that ran it
    retries: int | None = None  # Celery's retry number of the latest execution
    runs: int = 0  # executions started: 1 + retries + takeovers
    duplicates: int = 0  # deliveries skipped because the window already ran or runs


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
        """Return the shared state of every registered entry of `namespace`, each with its
        `running_since` (the latest `started_at` among its dispatch rows that have a start
        and no `finished_at`, else None)."""
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
        the states of `names` (with `running_since`, as `states` gives it), call
        `planner(now, states)`, then
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

    def forget_replica(self, namespace: str, replica: Replica) -> None:
        """Delete `replica`'s heartbeat: it stopped cleanly and is no longer a replica.

        Called by beat on a clean stop, so `replicas` lists it no more. A replica that was
        never recorded is not an error.
        """
        ...

    def namespaces(self) -> list[str]:
        """Return every namespace that has a registered entry, sorted.

        For operators who do not know which namespace beat used (the app's main name by
        default); reads only, creates nothing.
        """
        ...

    def history(
        self, namespace: str, entry: str | None = None, limit: int = 100
    ) -> list[DispatchRecord]:
        """Return dispatch rows, newest window first, optionally of one entry."""
        ...

    def set_paused(self, namespace: str, entry: str, paused: bool) -> bool:
        """Pause or resume `entry` for every replica; return False if it is not registered.

        Sets the entry's `paused` flag, which every later `states`, `register` and tick load
        returns. Registering the entry again (a restart, a changed definition) keeps the
        flag; only set_paused changes it.
        """
        ...

    def forget_entry(self, namespace: str, entry: str) -> bool:
        """Delete `entry`'s shared state (anchor, definition, last window, paused flag), for
        an entry no code defines any more; return False if it is not registered.

        Its dispatch history stays (pruned by age like any other), so a window it decided
        is never claimed again. A replica that still runs the entry registers it anew.
        """
        ...

    def claim_extra(
        self, namespace: str, claims: Sequence[NewClaim], *, replica: Replica, reason: str
    ) -> list[Claim]:
        """Claim windows outside the schedule's tick: a run triggered by hand
        (`reason="trigger"`) or past windows backfilled (`reason="backfill"`).

        Inserts a `claimed` row per claim, with `reason` recorded, under the same unique
        key (namespace, entry, window) as a tick: a window that already has a row (sent,
        skipped or claimed) is left alone and not returned. Does not take the tick lock and
        does not change `last_window`. Returns the committed claims (`attempts` 1); the
        caller publishes them and calls record_publish, and a claim it leaves unsent is
        taken over by a tick's reclaim like any other.
        """
        ...

    def start_execution(
        self,
        namespace: str,
        entry: str,
        window: datetime,
        *,
        worker: str,
        retries: int,
        stale_after: timedelta,
    ) -> Start:
        """Decide whether this delivery of a window may run, and record its start if so.

        Called by the worker hook before the task body runs. Atomic: of any number of
        concurrent calls for one window, at most one records a start, and every call
        sees the effect of those before it. On the dispatch row (namespace, entry,
        window) that carries a task id (claimed, sent or failed; not skipped):

        - no such row: return UNKNOWN and write nothing;
        - the row never started, or `retries` is greater than its recorded `retries`
          (a Celery retry of the window): record the start and return RUN;
        - the row started, never finished, and started before store now - `stale_after`
          (its worker is presumed lost): record the start and return TAKEOVER;
        - otherwise (it started within `stale_after` and has not finished, or it has
          finished, with `retries` not greater than recorded): add one to `duplicates`
          and return DUPLICATE.

        Recording the start sets `started_at` = store now, `worker`, `retries`, clears
        `finished_at`, `outcome` and `runtime`, and adds one to `runs`. The row's status
        is not changed (a worker may start a window before beat marks it sent).
        """
        ...

    def finish_execution(
        self,
        namespace: str,
        entry: str,
        window: datetime,
        *,
        worker: str,
        retries: int,
        outcome: Outcome,
        runtime: timedelta,
        detail: str | None = None,
    ) -> None:
        """Record the end of the execution `worker` started with `retries`.

        Sets `finished_at` = store now, `outcome`, `runtime` and, if given, `detail` (kept in
        the row's `error`: what went wrong, such as a command's exit status) on the dispatch
        row, only if the row's `worker` and `retries` are the given ones and `finished_at`
        is not set: an execution that was taken over or superseded by a retry records
        nothing.
        A missing row is not an error.
        """
        ...

    def claim_effect(
        self, namespace: str, key: str, *, owner: str, keep_for: timedelta, task_id: str | None
    ) -> bool:
        """Record the effect `key` once; return True if this call recorded it.

        Atomic under concurrency: of any number of simultaneous calls for one
        (namespace, key), from any process, exactly one returns True. A key recorded
        before is free again once its expiry (store time of recording + `keep_for`) has
        passed; recording it again replaces the old record. `owner` is a token unique to
        the caller (see release_effect); `task_id` is kept for operators.
        """
        ...

    def release_effect(self, namespace: str, key: str, *, owner: str) -> bool:
        """Forget `key` so that it can be recorded again, only if `owner` recorded it.

        Return whether a record was deleted. A key recorded since by someone else (after
        an expiry) is left alone.
        """
        ...

    def prune(self, namespace: str, before: datetime) -> int:
        """Delete dispatch rows claimed before `before`, replicas silent since then, and
        effect keys whose expiry has passed (store now); return how many dispatch rows
        and effect keys were deleted."""
        ...

    def close(self) -> None:
        """Release connections; the store reconnects if used again."""
        ...
