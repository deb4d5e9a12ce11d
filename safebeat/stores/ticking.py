"""Beat's side of a store written once: `tick`, `record_publish`, `release_claims` and
`heartbeat` as `TickAdapter` states them, over one narrow hook each that a backend fills
with its I/O.

The tick sequence: in one transaction that holds the namespace's tick lock, read the
store's clock, load the states of the due entries, call the planner, insert the claims
and skips under the unique key, advance the states, take over stale claims (on the
periodic pass), commit. The memory, SQLite and Django ORM stores give `SteppedTick`
their transaction and steps; PostgreSQL and Redis run the same sequence in two server
round trips each (`postgres.tick._tick`, Redis's `begin_tick` and `finish_tick` scripts).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from safebeat.identity import Replica
from safebeat.record_rules import released_age, states_after
from safebeat.records import Claim, EntryState, Planner, Reclaim, ReclaimPage, TickPlan, TickResult


class TickLockBusy(Exception):
    """Another replica holds the namespace's tick lock: this tick writes nothing."""


@dataclass(frozen=True)
class TickCall:
    """One call of `TickStore.tick`, as a backend's `_tick` receives it."""

    namespace: str
    names: list[str]
    planner: Planner
    replica: Replica
    reclaim: Reclaim | None


@dataclass(frozen=True)
class Release:
    """One call of `TickStore.release_claims`, prepared: the rows to hand back (id and the
    attempts the claim was made with), by which replica, and how far before store now
    their `claimed_at` goes (`record_rules.released_age`)."""

    replica: str
    age: timedelta
    attempts: Mapping[int, int]  # row id -> the claim's attempts

    @property
    def ids(self) -> list[int]:
        return list(self.attempts)


@dataclass(frozen=True)
class Heartbeat:
    """One call of `TickStore.heartbeat`, as a backend's `_heartbeat` receives it."""

    namespace: str
    replica: Replica
    version: str
    definitions: Mapping[str, str] | None  # None: unchanged, the stored ones are kept
    # None: `definitions` are the whole map; else they are the digests that changed and
    # these names are dropped from the stored map (a delta, refused without a record)
    removed: frozenset[str] | None = None

    def definitions_json(self) -> str:
        """The digests as JSON, as the SQL stores keep them (definitions given)."""
        return json.dumps(dict(self.definitions or {}), sort_keys=True)

    def patch_json(self) -> str:
        """The delta as a JSON merge patch (RFC 7396): each changed digest, null for each
        removed name."""
        patch: dict[str, str | None] = dict.fromkeys(self.removed or (), None)
        patch.update(self.definitions or {})
        return json.dumps(patch, sort_keys=True)


class _TickHooks(Protocol):
    def _tick(self, call: TickCall) -> TickResult | None:
        """Run the tick sequence; None if another replica holds the lock."""
        ...

    def _record_publish(
        self, namespace: str, sent: Sequence[int], failed: Mapping[int, str]
    ) -> None:
        """Mark `sent` (never empty together with `failed`) sent at store now and `failed`
        failed, each only while still `claimed`."""
        ...

    def _release_claims(self, namespace: str, release: Release) -> int:
        """Set `claimed_at` of the rows of `release` (never empty) still claimed by its
        replica with their attempts to store now minus its age; return how many."""
        ...

    def _heartbeat(self, beat: Heartbeat) -> bool:
        """Upsert the replica's record at store now with `beat.definitions` and return
        True; or, with none, refresh only `heartbeat_at` of its record and return whether
        it exists (creating nothing); or, with `beat.removed`, apply the delta to the
        record's definitions and return whether it exists (creating nothing)."""
        ...


class TickAdapter:
    """`TickStore.tick`, `record_publish`, `release_claims` and `heartbeat` (see
    `stores/protocols.py`) for a store that provides `_tick`, `_record_publish`,
    `_release_claims` and `_heartbeat`."""

    def tick(
        self: _TickHooks,
        namespace: str,
        names: Collection[str],
        planner: Planner,
        *,
        replica: Replica,
        reclaim: Reclaim | None = None,
    ) -> TickResult | None:
        return self._tick(TickCall(namespace, list(names), planner, replica, reclaim))

    def record_publish(
        self: _TickHooks, namespace: str, sent: Sequence[int], failed: Mapping[int, str]
    ) -> None:
        if sent or failed:
            self._record_publish(namespace, sent, failed)

    def release_claims(
        self: _TickHooks,
        namespace: str,
        claims: Sequence[Claim],
        *,
        replica: Replica,
        timeout: timedelta,
    ) -> int:
        if not claims:
            return 0
        attempts = {claim.id: claim.attempts for claim in claims}
        return self._release_claims(namespace, Release(replica.id, released_age(timeout), attempts))

    def heartbeat(
        self: _TickHooks,
        namespace: str,
        replica: Replica,
        version: str,
        definitions: Mapping[str, str] | None,
        *,
        removed: Collection[str] | None = None,
    ) -> bool:
        gone = None if removed is None else frozenset(removed)
        return self._heartbeat(Heartbeat(namespace, replica, version, definitions, gone))


@dataclass(frozen=True)
class TickSteps:
    """One backend's steps inside its tick transaction, at the store's `now`."""

    now: datetime
    load: Callable[[Collection[str]], Mapping[str, EntryState]]
    insert: Callable[[TickPlan], list[Claim]]  # returns the claims this call inserted
    advance: Callable[[Mapping[str, datetime]], None]  # the later window wins
    # the claims taken over, and what the pass read (see `record_rules.take_over_page`)
    reclaim: Callable[[Reclaim], tuple[list[Claim], ReclaimPage]]


class _SteppedStore(Protocol):
    def _tick_transaction(
        self, namespace: str, replica: Replica
    ) -> AbstractContextManager[TickSteps]:
        """Open the tick's transaction with the tick lock held (raise TickLockBusy if
        another replica holds it) and yield its steps; commit when the block ends."""
        ...


class SteppedTick(TickAdapter):
    """The tick sequence step by step, for a store that provides `_tick_transaction`."""

    def _tick(self: _SteppedStore, call: TickCall) -> TickResult | None:
        try:
            with self._tick_transaction(call.namespace, call.replica) as steps:
                states = steps.load(call.names)
                plan = call.planner(steps.now, states)
                claimed = steps.insert(plan)
                steps.advance(plan.advances)
                reclaimed: list[Claim] = []
                page: ReclaimPage | None = None
                if call.reclaim is not None:
                    reclaimed, page = steps.reclaim(call.reclaim)
        except TickLockBusy:
            return None
        return TickResult(steps.now, states_after(states, plan), claimed, reclaimed, plan, page)
