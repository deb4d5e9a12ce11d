"""The reference store: the Store contract in plain Python, for one process (tests, examples).

`memory://` is shared by every scheduler in the process that opens the same URL, so
several schedulers in one test behave like replicas. Nothing survives the process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from safebeat.identity import Replica
from safebeat.records import (
    Claim,
    Definition,
    DispatchRecord,
    EntryState,
    NewClaim,
    Outcome,
    Planner,
    Reclaim,
    Registration,
    ReplicaRecord,
    Start,
    Status,
    TickPlan,
    TickResult,
    decide_start,
    system_clock,
)
from safebeat.stores.base import StoreCheck


@dataclass(frozen=True)
class _Effect:
    owner: str
    expires_at: datetime


@dataclass
class _Namespace:
    entries: dict[str, EntryState]
    dispatches: dict[tuple[str, datetime], DispatchRecord]
    replicas: dict[str, ReplicaRecord]
    tick_lock: threading.Lock
    effects: dict[str, _Effect]


class MemoryStore:
    """Implements `safebeat.stores.base.Store` in memory; `clock` makes time controllable."""

    display_url = "memory://"

    def __init__(self, clock: Callable[[], datetime] = system_clock) -> None:
        self._clock = clock
        self._mutex = threading.RLock()
        self._namespaces: dict[str, _Namespace] = {}
        self._next_id = 1

    def _ns(self, namespace: str) -> _Namespace:
        if namespace not in self._namespaces:
            self._namespaces[namespace] = _Namespace({}, {}, {}, threading.Lock(), {})
        return self._namespaces[namespace]

    expected_schema_version = 1

    def migrate(self) -> int:
        return 1

    def schema_version(self) -> int:
        return 1

    def checks(self) -> list[StoreCheck]:
        return []

    def clock(self) -> datetime:
        return self._clock()

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
            names = {d.name for d in definitions}
            states = {n: s for n, s in ns.entries.items() if n in names}
            return Registration(states, changed)

    def states(self, namespace: str) -> dict[str, EntryState]:
        with self._mutex:
            ns = self._ns(namespace)
            return self._with_running(ns, ns.entries)

    @staticmethod
    def _with_running(ns: _Namespace, states: Mapping[str, EntryState]) -> dict[str, EntryState]:
        """`states` with `running_since`: the newest start of an unfinished execution."""
        running: dict[str, datetime] = {}
        for record in ns.dispatches.values():
            if record.started_at is not None and record.finished_at is None:
                previous = running.get(record.entry)
                if previous is None or record.started_at > previous:
                    running[record.entry] = record.started_at
        return {n: replace(s, running_since=running.get(n)) for n, s in states.items()}

    def tick(
        self,
        namespace: str,
        names: Collection[str],
        planner: Planner,
        *,
        replica: Replica,
        reclaim: Reclaim | None = None,
    ) -> TickResult | None:
        with self._mutex:
            ns = self._ns(namespace)
        if not ns.tick_lock.acquire(blocking=False):
            return None
        try:
            now = self.clock()
            with self._mutex:
                wanted = set(names)
                states = self._with_running(
                    ns, {n: s for n, s in ns.entries.items() if n in wanted}
                )
            plan = planner(now, states)
            with self._mutex:
                claimed = self._insert(ns, plan, replica, now)
                for name, window in plan.advances.items():
                    state = ns.entries.get(name)
                    if state is not None and (
                        state.last_window is None or window > state.last_window
                    ):
                        ns.entries[name] = replace(state, last_window=window)
                reclaimed = [] if reclaim is None else self._reclaim(ns, reclaim, replica, now)
                states = self._with_running(
                    ns, {n: s for n, s in ns.entries.items() if n in wanted}
                )
            return TickResult(now, states, claimed, reclaimed, plan)
        finally:
            ns.tick_lock.release()

    def _insert(
        self, ns: _Namespace, plan: TickPlan, replica: Replica, now: datetime
    ) -> list[Claim]:
        inserted: list[Claim] = []
        for claim in plan.claims:
            record = self._new_row(
                ns,
                replica,
                now,
                entry=claim.entry,
                window=claim.window,
                status=Status.CLAIMED,
                task_id=claim.task_id,
                task_name=claim.task_name,
            )
            if record is not None:
                inserted.append(Claim(record.id, claim.entry, claim.window, claim.task_id, 1))
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
        return inserted

    def _new_row(
        self,
        ns: _Namespace,
        replica: Replica,
        now: datetime,
        *,
        entry: str,
        window: datetime,
        status: Status,
        task_id: str | None = None,
        task_name: str | None = None,
        reason: str | None = None,
        skipped_from: datetime | None = None,
        skipped_count: int | None = None,
    ) -> DispatchRecord | None:
        """Insert a row unless (entry, window) exists: the unique key of every store."""
        if (entry, window) in ns.dispatches:
            return None
        record = DispatchRecord(
            id=self._next_id,
            entry=entry,
            window=window,
            status=status,
            task_id=task_id,
            task_name=task_name,
            reason=reason,
            skipped_from=skipped_from,
            skipped_count=skipped_count,
            replica=replica.id,
            host=replica.host,
            pid=replica.pid,
            claimed_at=now,
            sent_at=None,
            attempts=1,
            error=None,
        )
        self._next_id += 1
        ns.dispatches[(entry, window)] = record
        return record

    def _reclaim(
        self, ns: _Namespace, reclaim: Reclaim, replica: Replica, now: datetime
    ) -> list[Claim]:
        reclaimed: list[Claim] = []
        names, stale_before = set(reclaim.entries), now - reclaim.timeout
        stale = sorted(
            (
                r
                for r in ns.dispatches.values()
                if r.status is Status.CLAIMED and r.entry in names and r.claimed_at < stale_before
            ),
            key=lambda r: r.claimed_at,
        )
        for record in stale[: reclaim.limit]:
            taken = replace(
                record,
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
        return reclaimed

    def record_publish(
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

    def heartbeat(
        self, namespace: str, replica: Replica, version: str, definitions: Mapping[str, str]
    ) -> None:
        with self._mutex:
            ns, now = self._ns(namespace), self.clock()
            previous = ns.replicas.get(replica.id)
            ns.replicas[replica.id] = ReplicaRecord(
                replica=replica.id,
                host=replica.host,
                pid=replica.pid,
                version=version,
                started_at=previous.started_at if previous else now,
                heartbeat_at=now,
                definitions=dict(definitions),
            )

    def replicas(self, namespace: str) -> list[ReplicaRecord]:
        with self._mutex:
            records = list(self._ns(namespace).replicas.values())
        return sorted(records, key=lambda r: r.heartbeat_at, reverse=True)

    def forget_replica(self, namespace: str, replica: Replica) -> None:
        with self._mutex:
            self._ns(namespace).replicas.pop(replica.id, None)

    def namespaces(self) -> list[str]:
        with self._mutex:
            return sorted(name for name, ns in self._namespaces.items() if ns.entries)

    def history(
        self, namespace: str, entry: str | None = None, limit: int = 100
    ) -> list[DispatchRecord]:
        with self._mutex:
            records = [
                r
                for r in self._ns(namespace).dispatches.values()
                if entry is None or r.entry == entry
            ]
        records.sort(key=lambda r: (r.window, r.id), reverse=True)
        return records[:limit]

    def set_paused(self, namespace: str, entry: str, paused: bool) -> bool:
        with self._mutex:
            ns = self._ns(namespace)
            state = ns.entries.get(entry)
            if state is None:
                return False
            ns.entries[entry] = replace(state, paused=paused)
            return True

    def claim_extra(
        self, namespace: str, claims: Sequence[NewClaim], *, replica: Replica, reason: str
    ) -> list[Claim]:
        with self._mutex:
            ns, now = self._ns(namespace), self.clock()
            inserted = []
            for claim in claims:
                record = self._new_row(
                    ns,
                    replica,
                    now,
                    entry=claim.entry,
                    window=claim.window,
                    status=Status.CLAIMED,
                    task_id=claim.task_id,
                    task_name=claim.task_name,
                    reason=reason,
                )
                if record is not None:
                    inserted.append(Claim(record.id, claim.entry, claim.window, claim.task_id, 1))
            return inserted

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
        with self._mutex:
            ns, now = self._ns(namespace), self.clock()
            record = ns.dispatches.get((entry, window))
            if record is None or record.task_id is None:
                return Start.UNKNOWN
            verdict = decide_start(
                started_at=record.started_at,
                finished_at=record.finished_at,
                recorded_retries=record.retries,
                retries=retries,
                now=now,
                stale_after=stale_after,
            )
            if verdict is Start.DUPLICATE:
                ns.dispatches[(entry, window)] = replace(record, duplicates=record.duplicates + 1)
                return Start.DUPLICATE
            ns.dispatches[(entry, window)] = replace(
                record,
                started_at=now,
                worker=worker,
                retries=retries,
                finished_at=None,
                outcome=None,
                runtime=None,
                runs=record.runs + 1,
            )
            return verdict

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
        with self._mutex:
            ns, now = self._ns(namespace), self.clock()
            record = ns.dispatches.get((entry, window))
            if (
                record is None
                or record.worker != worker
                or record.retries != retries
                or record.finished_at is not None
            ):
                return
            ns.dispatches[(entry, window)] = replace(
                record,
                finished_at=now,
                outcome=outcome,
                runtime=runtime,
                error=record.error if detail is None else detail,
            )

    def claim_effect(
        self, namespace: str, key: str, *, owner: str, keep_for: timedelta, task_id: str | None
    ) -> bool:
        with self._mutex:
            ns, now = self._ns(namespace), self.clock()
            effect = ns.effects.get(key)
            if effect is not None and effect.expires_at > now:
                return False
            ns.effects[key] = _Effect(owner, now + keep_for)
            return True

    def release_effect(self, namespace: str, key: str, *, owner: str) -> bool:
        with self._mutex:
            ns = self._ns(namespace)
            effect = ns.effects.get(key)
            if effect is None or effect.owner != owner:
                return False
            del ns.effects[key]
            return True

    def prune(self, namespace: str, before: datetime) -> int:
        with self._mutex:
            ns, now = self._ns(namespace), self.clock()
            old = [k for k, r in ns.dispatches.items() if r.claimed_at < before]
            for key in old:
                del ns.dispatches[key]
            for replica_id in [k for k, r in ns.replicas.items() if r.heartbeat_at < before]:
                del ns.replicas[replica_id]
            expired = [k for k, e in ns.effects.items() if e.expires_at <= now]
            for effect_key in expired:
                del ns.effects[effect_key]
            return len(old) + len(expired)

    def close(self) -> None:
        """Nothing to release: the data lives as long as the process."""
