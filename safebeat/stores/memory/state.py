"""The memory store's state: namespaces of entries, dispatch rows, replicas and effect keys,
behind one lock, with the store's (controllable) clock."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from safebeat.facts import Dispatched, LiveRun, WindowRow
from safebeat.identity import Replica
from safebeat.record_rules import lease_alive
from safebeat.records import (
    AuditRecord,
    Claim,
    DispatchRecord,
    EntryState,
    NewClaim,
    ReplicaRecord,
    Status,
    system_clock,
)


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
    audit: list[AuditRecord] = field(default_factory=list)
    runtime: dict[str, str] = field(default_factory=dict)
    runtime_version: int = 0


class MemoryState:
    """Everything the memory store holds, and the helpers every part of it uses."""

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

    def clock(self) -> datetime:
        return self._clock()

    def _with_running(
        self, ns: _Namespace, states: Mapping[str, EntryState]
    ) -> dict[str, EntryState]:
        """`states` with their facts: `live_run` (the newest started, unfinished run whose
        lease is alive) and `newest_dispatched` (the row of the newest window claimed or
        sent)."""
        running: dict[str, DispatchRecord] = {}
        newest: dict[str, DispatchRecord] = {}
        now = self.clock()
        for record in ns.dispatches.values():
            started = record.started_at
            if started and record.finished_at is None and lease_alive(record.lease_until, now):
                previous = running.get(record.entry)
                if previous is None or started > (previous.started_at or started):
                    running[record.entry] = record
            if record.status in {Status.CLAIMED, Status.SENT}:
                latest = newest.get(record.entry)
                if latest is None or record.window > latest.window:
                    newest[record.entry] = record
        return {
            n: replace(
                s,
                live_run=_live_run(running.get(n)),
                newest_dispatched=_dispatched(newest.get(n)),
            )
            for n, s in states.items()
        }

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

    def _claim_row(
        self,
        ns: _Namespace,
        replica: Replica,
        now: datetime,
        claim: NewClaim,
    ) -> Claim | None:
        """Insert the `claimed` row of `claim` (see `_new_row`); None if its window has one."""
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
        if record is None:
            return None
        return Claim(record.id, claim.entry, claim.window, claim.task_id, 1)

    def _window_row(
        self, ns: _Namespace, replica: Replica, now: datetime, row: WindowRow
    ) -> DispatchRecord | None:
        """Insert `row`, claimed or skipped (see `_new_row`); None if its window has one."""
        if row.task_id is None:
            status, first, count = Status.SKIPPED, row.window, 1
        else:
            status, first, count = Status.CLAIMED, None, None
        return self._new_row(
            ns,
            replica,
            now,
            entry=row.entry,
            window=row.window,
            status=status,
            task_id=row.task_id,
            task_name=row.task_name,
            reason=row.reason,
            skipped_from=first,
            skipped_count=count,
        )

    def close(self) -> None:
        """Nothing to release: the data lives as long as the process."""


def _live_run(record: DispatchRecord | None) -> LiveRun | None:
    if record is None or record.started_at is None or record.lease_until is None:
        return None
    return LiveRun(record.window, record.started_at, record.lease_until, record.task_id)


def _dispatched(record: DispatchRecord | None) -> Dispatched | None:
    if record is None:
        return None
    return Dispatched(record.window, record.claimed_at, record.started_at)
