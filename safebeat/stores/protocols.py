"""The store's protocols: what every backend guarantees to each of its clients.

A store holds only schedule state, claims, their history (including what the worker hook
recorded about each execution) and effect keys; Celery owns tasks and results. Several
replicas share one store. Each client sees the slice it uses: beat a `TickStore`, the
worker hook an `ExecutionStore`, `safebeat.claim` an `EffectStore`, the operator tools
(CLI, admin, doctor) an `AdminStore`; a backend implements `Store`, their union. The
guarantees below are what make "each window is dispatched once" true, and the contract
suite (`safebeat.testing.stores.StoreContract`) checks them against every backend.
The records these methods take and return live in `safebeat.records`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from safebeat.facts import WindowRow, WrittenRow
from safebeat.identity import Replica
from safebeat.record_rules import decide_start, take_over_page

# The records live in safebeat.records; they are named here too for code that imported
# them from this module.
from safebeat.records import (
    AuditAction,
    AuditEvent,
    AuditRecord,
    Claim,
    Definition,
    DispatchRecord,
    EntryState,
    LeasedRun,
    NewClaim,
    NewSkip,
    Outcome,
    Pause,
    Planner,
    Reclaim,
    ReclaimPage,
    Registration,
    ReplicaRecord,
    RunEnd,
    StaleClaim,
    StaleMark,
    Start,
    Status,
    TickPlan,
    TickResult,
    system_clock,
)

__all__ = [
    "AdminStore",
    "AuditAction",
    "AuditEvent",
    "AuditRecord",
    "Claim",
    "Definition",
    "DispatchRecord",
    "EffectStore",
    "EntryState",
    "ExecutionStore",
    "LeasedRun",
    "NewClaim",
    "NewSkip",
    "Outcome",
    "Pause",
    "Planner",
    "Reclaim",
    "ReclaimPage",
    "Registration",
    "ReplicaRecord",
    "RunEnd",
    "RuntimeEntryStore",
    "StaleClaim",
    "StaleMark",
    "Start",
    "Status",
    "Store",
    "StoreCheck",
    "StoreConnection",
    "TickPlan",
    "TickResult",
    "TickStore",
    "decide_start",
    "system_clock",
    "take_over_page",
]


@dataclass(frozen=True)
class StoreCheck:
    """A check only one backend can make, for `safebeat doctor`: `problem` is None when it
    passed, and `found` says what was seen."""

    name: str
    found: str
    problem: str | None = None


class StoreConnection(Protocol):
    """What every client of a store may call. Every method is synchronous.

    Methods raise `StoreUnavailable` when the backend cannot be reached (callers retry
    with backoff) and `StoreError` for anything retrying will not fix; driver exceptions
    never escape, and messages never contain a password.
    """

    #: The store's URL with any password replaced by `***`, for banners and logs.
    display_url: str

    def clock(self) -> datetime:
        """Return the store's "now" as an aware UTC datetime (the same clock for all replicas)."""
        ...

    def close(self) -> None:
        """Release connections; the store reconnects if used again."""
        ...


class TickStore(StoreConnection, Protocol):
    """What beat uses: register its entries, tick, confirm publishes, heartbeat, prune."""

    def migrate(self) -> int:
        """Bring the schema to this version of safebeat; return the schema version.

        Safe to call from many replicas at once: one applies, the others wait and see
        the result.
        """
        ...

    def register(
        self, namespace: str, definitions: Sequence[Definition], replica: Replica
    ) -> Registration:
        """Record this replica's entry definitions without clobbering shared state.

        A new entry gets `anchor` = store now truncated to the second and `defined_at` =
        store now. An entry whose digest differs from the stored one gets the new
        definition and is listed in `changed`; only if its *schedule* text changed too
        does `defined_at` become store now (arguments or options do not move windows).
        Its anchor and `last_window` are always kept. An unchanged entry is left as it is:
        neither written nor locked. Return the changed entries (`Registration.changed`),
        never the states: a restart of 1,000,000 unchanged entries costs reading their
        digests, in slices, so that neither side holds the whole namespace at once.
        """
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
        - fenced (`safebeat.record_rules.fenced`): a claim or skip whose window is at or
          before the entry's `last_window` as stored when the row is written is not
          written (some replica decided it after this plan was made), and a store whose
          tick lock was lost while planning writes nothing and raises
          `StoreUnavailable` (`TickTooLong` where it can tell the lock expired);
        - set `last_window` to the later of the stored value and each advance;
        - if `reclaim` is given, read a page of the namespace's stale rows: those that
          stayed `claimed` for longer than `reclaim.timeout`, or whose run's lease
          expired without a finish (its worker died, and no broker may deliver it
          again), at most `reclaim.page` of them, ordered by (`claimed_at`, id), the
          first after `reclaim.after` (from the oldest if None). Of these, take over for
          `replica` those `record_rules.take_over_page` chooses (up to `reclaim.limit`, oldest
          first, skipping rows whose entry is not `in reclaim.defines`: left for a
          replica that defines it), and return what it says of the page as the result's
          `reclaim_page`. The store finds these rows through an index (by claim time,
          and of unfinished runs), so the pass costs at most a page, not what the stale
          rows or the entries do: it only tests membership in `reclaim.defines`, never
          iterates or sends it. Each row taken
          over: its `attempts` grows by one, `claimed_at` becomes now and its status
          `claimed`, so no other replica takes it too, and `lease_until` is cleared, so
          a dead run is taken once (the delivery of the re-published message takes the
          run over). A store that cannot test membership inside its transaction may take
          over after the commit, in one atomic step that takes a row only while it is
          still stale;
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

    def release_claims(
        self,
        namespace: str,
        claims: Sequence[Claim],
        *,
        replica: Replica,
        timeout: timedelta,
    ) -> int:
        """Hand back `claims` that `replica` made (or took over) and never handed to the
        transport, so that the next take-over pass of any replica re-publishes them
        instead of waiting `timeout` (the claim timeout its `Reclaim` uses).

        In one statement or script: a row is released only while it is still `claimed`,
        by `replica`, with the claim's `attempts` (a row taken over since, by anyone, or
        recorded sent or failed is left alone). A released row keeps its status, task id,
        attempts and replica; its `claimed_at` becomes store now minus
        `record_rules.released_age(timeout)`, which the take-over rule of `tick` already
        counts as stale (the take-over adds the attempt). Return how many rows were
        released.
        """
        ...

    def heartbeat(
        self,
        namespace: str,
        replica: Replica,
        version: str,
        definitions: Mapping[str, str] | None,
        *,
        removed: Collection[str] | None = None,
    ) -> bool:
        """Record that `replica` is alive now.

        With `definitions` (the entry digests it runs): record them and `version`,
        creating the replica's record if needed (its `started_at` is kept), and return
        True. With None: only refresh the liveness of the record the store holds, keeping
        its version and definitions, and return whether there was one. With `removed` (a
        delta, so that a change of one entry among many sends one digest): `definitions`
        are only the digests added or changed; set them and `version` in the record the
        store holds, drop the `removed` names from its definitions, and return whether
        there was one. A lost record (pruned, flushed) is not created again without its
        definitions, nor from a delta: the caller sends them in full.
        """
        ...

    def forget_replica(self, namespace: str, replica: Replica) -> None:
        """Delete `replica`'s heartbeat (beat's clean stop), so `replicas` lists it no more.
        A replica that was never recorded is not an error."""
        ...

    def prune(self, namespace: str, before: datetime, *, budget: timedelta | None = None) -> int:
        """Delete dispatch rows claimed before `before`, replicas silent since then, audit
        records made before then, and effect keys whose expiry has passed (store now);
        return how many dispatch rows and effect keys were deleted.

        Dispatch rows go in batches, oldest first, each a short transaction (or script) of
        its own, so a backlog of any size never makes one long statement. With a `budget`,
        no batch starts once it has passed (one always runs): what is left is the next
        call's; without one, batches run until none is left."""
        ...


class ExecutionStore(StoreConnection, Protocol):
    """What the worker hook uses: record each execution of a window, skip duplicates."""

    def start_execution(
        self, namespace: str, run: LeasedRun, *, lease: timedelta, exclusive: bool = False
    ) -> Start:
        """Decide whether this delivery of a window may run (as `run`: its worker and Celery
        `retries`), and record its start if so.

        Called by the worker hook before the task body runs. Atomic: of any number of
        concurrent calls for one window, at most one records a start, and every call
        sees the effect of those before it. On the dispatch row (namespace, `run.entry`,
        `run.window`) that carries a task id (claimed, sent or failed; not skipped), by
        `record_rules.decide_start`:

        - no such row: return UNKNOWN and write nothing;
        - the row never started: record the start and return RUN;
        - the row started, never finished, and its `lease_until` is after store now
          (its run is alive): write nothing and return DEFER, whatever `retries`;
        - the row started, never finished, and its lease expired (its run is dead):
          record the start and return TAKEOVER, whatever `retries`;
        - the row finished with the outcome `retry` and `retries` is greater than its
          recorded `retries` (the Celery retry it asked for): record the start and
          return RUN;
        - the row finished otherwise: add one to `duplicates` and return DUPLICATE;
        - with `exclusive` (the entry's `overlap="forbid"`), a RUN or TAKEOVER while
          another window of the entry has an unfinished run with a live lease: write
          nothing and return DEFER.

        Recording the start sets `started_at` = store now, `lease_until` = store now +
        `lease`, `worker`, `retries`, clears `finished_at`, `outcome` and `runtime`, and
        adds one to `runs`. The row's status is not changed (a worker may start a window
        before beat marks it sent).
        """
        ...

    def renew_executions(
        self, namespace: str, runs: Sequence[LeasedRun], *, lease: timedelta
    ) -> int:
        """Extend the lease of each of `runs` to store now + `lease`, in one call.

        Only a row that still holds the run (`LeasedRun.holds`) is renewed (a run taken
        over or finished renews nothing); return how many were.
        """
        ...

    def finish_execution(self, namespace: str, run: LeasedRun, end: RunEnd) -> None:
        """Record how `run` ended.

        Sets `finished_at` = store now, `end.outcome`, `end.runtime` and, if given,
        `end.detail` (kept in the row's `error`) on the run's dispatch row, only if the row
        still holds the run (`LeasedRun.holds`: its `worker` and `retries` are the run's and
        `finished_at` is not set): an execution that was taken over or superseded by a
        retry records nothing. A missing row is not an error.
        """
        ...


class EffectStore(StoreConnection, Protocol):
    """What `safebeat.claim` uses: record an effect key once."""

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


class AdminStore(StoreConnection, Protocol):
    """What the operator tools use (CLI, admin, doctor): read the shared state and
    history, pause entries, claim windows outside the schedule, check the schema."""

    def states(self, namespace: str) -> dict[str, EntryState]:
        """Return the shared state of every registered entry of `namespace`, each with its
        `running_since` (the latest `started_at` among its dispatch rows that have a start
        and no `finished_at`, else None)."""
        ...

    def state(self, namespace: str, entry: str) -> EntryState | None:
        """Return the shared state of `entry` as `states` gives it, reading that entry
        only; None if it is not registered."""
        ...

    def replicas(self, namespace: str) -> list[ReplicaRecord]:
        """Return every replica's last heartbeat, newest first."""
        ...

    def heartbeats(self, namespace: str) -> list[datetime]:
        """Return the instant of every replica's last heartbeat, newest first: what
        `replicas` lists, without reading the digests each replica runs (beat's metrics
        read this at every heartbeat, so it must not cost more with more entries)."""
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

    def set_paused(self, namespace: str, entry: str, pause: Pause) -> bool:
        """Pause or resume `entry` for every replica; return False if it is not registered.

        Sets the entry's `paused` flag, `paused_until` (`pause.until`: the pause ends there
        by itself, see `EntryState.paused_at`; None: until resumed) and `pause_note`, which
        every later `states`, `register` and tick load returns. Resuming clears all three.
        Registering the entry again (a restart, a changed definition) keeps them; only
        set_paused changes them.
        """
        ...

    def record_audit(self, namespace: str, event: AuditEvent) -> AuditRecord:
        """Append `event` to the namespace's audit trail at store now; return the record.

        Ids grow with every record of a namespace. Records are kept until `prune` deletes
        those made before its `before` (safebeat_retention).
        """
        ...

    def audit(
        self, namespace: str, entry: str | None = None, limit: int = 100
    ) -> list[AuditRecord]:
        """Return the newest `limit` audit records of `namespace` (of `entry` only, if
        given), newest first, each with its windows in the order recorded."""
        ...

    def forget_entry(self, namespace: str, entry: str) -> bool:
        """Delete `entry`'s shared state (anchor, definition, last window, paused flag), for
        an entry no code defines any more; return False if it is not registered.

        Its dispatch history stays (pruned by age like any other), so a window it decided
        is never claimed again. A replica that still runs the entry registers it anew.
        """
        ...

    def write_windows(
        self, namespace: str, rows: Sequence[WindowRow], *, replica: Replica
    ) -> list[WrittenRow]:
        """Write windows outside the schedule's tick, each claimed (a row with a task id: a
        run triggered by hand, past windows backfilled, a window run here) or skipped (no
        task id: a window passed over on purpose), with its reason recorded.

        Inserts a row per window, claimed at store now, under the same unique key
        (namespace, entry, window) as a tick: a window that already has a row (sent,
        skipped or claimed), or that an earlier row of `rows` took, is left alone and not
        returned. A skipped row is a span of its one window. Does not take the tick lock,
        is not fenced and does not change `last_window`. Returns the rows written, in the
        order of `rows`, with their ids; the caller publishes the claimed ones and calls
        record_publish, and a claim it leaves unsent is taken over by a tick's reclaim like
        any other.
        """
        ...

    def claim_extra(
        self, namespace: str, claims: Sequence[NewClaim], *, replica: Replica, reason: str
    ) -> list[Claim]:
        """`write_windows` of `claims`, each claimed with `reason` (`trigger`, `backfill`);
        returns the committed claims (`attempts` 1)."""
        ...

    def schema_version(self) -> int:
        """Return the schema (or key layout) version the store is at; 0: never migrated."""
        ...

    @property
    def expected_schema_version(self) -> int:
        """The schema version this safebeat writes: `migrate` brings the store to it."""
        ...

    def checks(self) -> list[StoreCheck]:
        """Run the checks only this backend can make (a Redis eviction policy that could
        delete claims, ...); most backends have none."""
        ...


class RuntimeEntryStore(StoreConnection, Protocol):
    """What `safebeat.schedules` and beat use for entries added at run time: stored entry
    definitions (JSON text, see `safebeat.entries.runtime_definitions`) beside the code's
    `beat_schedule`.

    Every change moves the namespace's version, so a replica finds out whether anything
    changed with one cheap read (`runtime_version`) per look, not by loading them all.
    """

    def save_runtime_entry(self, namespace: str, name: str, spec: str, *, replace: bool) -> bool:
        """Store entry `name`'s definition `spec`; return whether it was stored.

        With `replace` False it is added only if no entry of that name is stored (False
        otherwise); with `replace` True it replaces a stored one only (False if none is).
        A stored change adds one to the namespace's version, in the same transaction.
        """
        ...

    def delete_runtime_entry(self, namespace: str, name: str) -> bool:
        """Delete stored entry `name`; return False if none was stored. A deletion adds one
        to the namespace's version. The entry's shared state and history are left alone."""
        ...

    def runtime_entries(self, namespace: str) -> dict[str, str]:
        """Return every stored entry definition of `namespace` by name."""
        ...

    def runtime_version(self, namespace: str) -> int:
        """Return how many changes were made to `namespace`'s stored entries (0: none ever).

        One small read: a replica compares it with the version it last loaded.
        """
        ...


class Store(TickStore, ExecutionStore, EffectStore, AdminStore, RuntimeEntryStore, Protocol):
    """What a backend implements: every client's protocol."""
