"""The reference store: the Store contract in plain Python, for one process (tests, examples).

`memory://` is shared by every scheduler in the process that opens the same URL, so
several schedulers in one test behave like replicas. Nothing survives the process.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from safebeat.identity import Replica
from safebeat.record_rules import fence, take_over_page, unsent_and_stale
from safebeat.records import (
    Claim,
    Definition,
    DispatchRecord,
    EntryState,
    Reclaim,
    ReclaimPage,
    Registration,
    ReplicaRecord,
    StaleClaim,
    Status,
    TickPlan,
)
from safebeat.stores.memory.admin import MemoryAdmin
from safebeat.stores.memory.executions import MemoryExecutions
from safebeat.stores.memory.state import _Namespace
from safebeat.stores.protocols import StoreCheck
from safebeat.stores.ticking import Heartbeat, Release, SteppedTick, TickLockBusy, TickSteps

T = TypeVar("T")


class MemoryStore(SteppedTick, MemoryExecutions, MemoryAdmin):
    """Implements `safebeat.stores.protocols.Store` in memory; `clock` makes time controllable.

    The state is `state.py`'s; operator reads are `admin.py`'s, executions and effects
    `executions.py`'s; beat's side (register, tick, heartbeat, prune) is here.
    """

    expected_schema_version = 1

    def migrate(self) -> int:
        return 1

    def schema_version(self) -> int:
        return 1

    def checks(self) -> list[StoreCheck]:
        return []

    def register(
        self, namespace: str, definitions: Sequence[Definition], replica: Replica
    ) -> Registration:
        with self._mutex:
            ns, now = self._ns(namespace), self.clock()
            changed: dict[str, str] = {}
            for definition in definitions:
                state = ns.entries.get(definition.name)
                if state is None:
                    ns.entries[definition.name] = EntryState(
                        name=definition.name,
                        anchor=now.replace(microsecond=0),
                        defined_at=now,
                        last_window=None,
                        digest=definition.digest,
                        schedule=definition.schedule,
                    )
                elif state.digest != definition.digest:
                    changed[definition.name] = state.digest
                    moved = state.schedule != definition.schedule
                    ns.entries[definition.name] = replace(
                        state,
                        digest=definition.digest,
                        schedule=definition.schedule,
                        defined_at=now if moved else state.defined_at,
                    )
            return Registration(changed)

    @contextmanager
    def _tick_transaction(self, namespace: str, replica: Replica) -> Iterator[TickSteps]:
        with self._mutex:
            ns = self._ns(namespace)
        if not ns.tick_lock.acquire(blocking=False):
            raise TickLockBusy(namespace)
        try:
            now = self.clock()
            yield TickSteps(
                now=now,
                load=lambda names: self._locked(self._load, ns, names),
                insert=lambda plan: self._locked(self._insert, ns, plan, replica, now),
                advance=lambda advances: self._locked(self._advance, ns, advances),
                reclaim=lambda reclaim: self._locked(self._reclaim, ns, reclaim, replica, now),
            )
        finally:
            ns.tick_lock.release()

    def _locked(self, step: Callable[..., T], *args: Any) -> T:
        with self._mutex:
            return step(*args)

    def _load(self, ns: _Namespace, names: Collection[str]) -> dict[str, EntryState]:
        wanted = set(names)
        return self._with_running(ns, {n: s for n, s in ns.entries.items() if n in wanted})

    @staticmethod
    def _advance(ns: _Namespace, advances: Mapping[str, datetime]) -> None:
        for name, window in advances.items():
            state = ns.entries.get(name)
            if state is not None and (state.last_window is None or window > state.last_window):
                ns.entries[name] = replace(state, last_window=window)

    def _insert(
        self, ns: _Namespace, plan: TickPlan, replica: Replica, now: datetime
    ) -> list[Claim]:
        plan = fence(plan, {name: state.last_window for name, state in ns.entries.items()})
        rows = [self._claim_row(ns, replica, now, claim) for claim in plan.claims]
        for skip in plan.skips:
            self._new_row(
                ns,
                replica,
                now,
                entry=skip.entry,
                window=skip.window,
                status=Status.SKIPPED,
                reason=skip.reason,
                skipped_from=skip.first,
                skipped_count=skip.count,
            )
        return [claim for claim in rows if claim is not None]

    def _reclaim(
        self, ns: _Namespace, reclaim: Reclaim, replica: Replica, now: datetime
    ) -> tuple[list[Claim], ReclaimPage]:
        stale_before = now - reclaim.timeout
        after = reclaim.after

        def lost(r: DispatchRecord) -> bool:
            # Unsent past the timeout, or a run whose lease expired without a finish.
            unsent = unsent_and_stale(r, stale_before, now)
            dead = r.finished_at is None and r.lease_until is not None and r.lease_until <= now
            later = after is None or (r.claimed_at, r.id) > (after.claimed_at, after.id)
            return r.task_id is not None and (unsent or dead) and later

        stale = sorted(
            (r for r in ns.dispatches.values() if lost(r)), key=lambda r: (r.claimed_at, r.id)
        )[: reclaim.page]
        chosen, page = take_over_page(
            reclaim, [StaleClaim(r.id, r.entry, r.claimed_at) for r in stale]
        )
        wanted = set(chosen)
        reclaimed: list[Claim] = []
        for record in stale:
            if record.id not in wanted:
                continue
            taken = replace(
                record,
                status=Status.CLAIMED,
                lease_until=None,
                claimed_at=now,
                attempts=record.attempts + 1,
                replica=replica.id,
                host=replica.host,
                pid=replica.pid,
            )
            ns.dispatches[(record.entry, record.window)] = taken
            assert taken.task_id is not None  # noqa: S101 - claims always carry a task id
            reclaimed.append(
                Claim(taken.id, taken.entry, taken.window, taken.task_id, taken.attempts)
            )
        return reclaimed, page

    def _record_publish(
        self, namespace: str, sent: Sequence[int], failed: Mapping[int, str]
    ) -> None:
        with self._mutex:
            ns, now = self._ns(namespace), self.clock()
            wanted = set(sent) | set(failed)
            for key, record in list(ns.dispatches.items()):
                if record.id not in wanted or record.status is not Status.CLAIMED:
                    continue
                if record.id in failed:
                    ns.dispatches[key] = replace(
                        record, status=Status.FAILED, error=failed[record.id]
                    )
                else:
                    ns.dispatches[key] = replace(record, status=Status.SENT, sent_at=now)

    def _release_claims(self, namespace: str, release: Release) -> int:
        with self._mutex:
            ns, now = self._ns(namespace), self.clock()
            released = 0
            for key, record in list(ns.dispatches.items()):
                if (
                    release.attempts.get(record.id) == record.attempts
                    and record.status is Status.CLAIMED
                    and record.replica == release.replica
                ):
                    ns.dispatches[key] = replace(record, claimed_at=now - release.age)
                    released += 1
            return released

    #: `_heartbeat` applies a delta (`Heartbeat.removed`): beat sends one after a change.
    heartbeat_deltas = True

    def _heartbeat(self, beat: Heartbeat) -> bool:
        with self._mutex:
            ns, now = self._ns(beat.namespace), self.clock()
            replica = beat.replica
            previous = ns.replicas.get(replica.id)
            if beat.definitions is None or beat.removed is not None:
                if previous is None:
                    return False
                if beat.removed is None:
                    ns.replicas[replica.id] = replace(previous, heartbeat_at=now)
                    return True
                kept = {k: v for k, v in previous.definitions.items() if k not in beat.removed}
                ns.replicas[replica.id] = replace(
                    previous,
                    heartbeat_at=now,
                    version=beat.version,
                    definitions={**kept, **(beat.definitions or {})},
                )
                return True
            ns.replicas[replica.id] = ReplicaRecord(
                replica=replica.id,
                host=replica.host,
                pid=replica.pid,
                version=beat.version,
                started_at=previous.started_at if previous else now,
                heartbeat_at=now,
                definitions=dict(beat.definitions),
            )
            return True

    def forget_replica(self, namespace: str, replica: Replica) -> None:
        with self._mutex:
            self._ns(namespace).replicas.pop(replica.id, None)

    def prune(self, namespace: str, before: datetime, *, budget: timedelta | None = None) -> int:
        """Everything at once, whatever the budget: memory holds no transaction open."""
        with self._mutex:
            ns, now = self._ns(namespace), self.clock()
            old = [k for k, r in ns.dispatches.items() if r.claimed_at < before]
            for key in old:
                del ns.dispatches[key]
            for replica_id in [k for k, r in ns.replicas.items() if r.heartbeat_at < before]:
                del ns.replicas[replica_id]
            ns.audit = [r for r in ns.audit if r.at >= before]
            expired = [k for k, e in ns.effects.items() if e.expires_at <= now]
            for effect_key in expired:
                del ns.effects[effect_key]
            return len(old) + len(expired)


__all__ = ["MemoryStore"]
