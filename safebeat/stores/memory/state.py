"""The memory store's state: namespaces of entries, dispatch rows, replicas and effect keys,
behind one lock, with the store's (controllable) clock."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

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
        """`states` with `running_since` (the newest start of an unfinished execution whose
        lease is alive) and `queued_since` (the claim time of the newest dispatched window,
        if not started)."""
        running: dict[str, datetime] = {}
        newest: dict[str, DispatchRecord] = {}
        now = self.clock()
        for record in ns.dispatches.values():
            if (
                record.started_at is not None
                and record.finished_at is None
                and lease_alive(record.lease_until, now)
            ):
                previous = running.get(record.entry)
                if previous is None or record.started_at > previous:
                    running[record.entry] = record.started_at
            if record.status in {Status.CLAIMED, Status.SENT}:
                latest = newest.get(record.entry)
                if latest is None or record.window > latest.window:
                    newest[record.entry] = record
        queued = {
            entry: record.claimed_at
            for entry, record in newest.items()
            if record.started_at is None
        }
        return {
            n: replace(s, running_since=running.get(n), queued_since=queued.get(n))
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
        reason: str | None = None,
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
            reason=reason,
        )
        if record is None:
            return None
        return Claim(record.id, claim.entry, claim.window, claim.task_id, 1)

    def close(self) -> None:
        """Nothing to release: the data lives as long as the process."""
