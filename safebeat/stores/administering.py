"""The operator tools' side of a store written once: `AdminAdapter` states the
`AdminStore` methods whose signature, guard and record are the same in every backend, over
one narrow hook each that a backend fills with its I/O.

The rules kept here: a resume stores no end and no note; a read of `limit` < 1 rows, or a
claim of no windows, asks the backend nothing; an audit row and an extra claim become their
records (`AuditRecord`, `Claim` with `attempts` 1) here, from what the backend wrote.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Protocol

from safebeat.identity import Replica
from safebeat.records import AuditEvent, AuditRecord, Claim, DispatchRecord, NewClaim, Pause

#: A window `claim_extra` inserted: its row id, entry, window and task id.
ClaimedRow = tuple[int, str, datetime, str]


class _AdminHooks(Protocol):
    def _store_pause(self, namespace: str, entry: str, pause: Pause) -> bool:
        """Set the entry's `paused`, `paused_until` and `pause_note` to `pause`'s; return
        False if the entry is not registered."""
        ...

    def _history(self, namespace: str, entry: str | None, limit: int) -> list[DispatchRecord]:
        """The newest `limit` (at least 1) dispatch rows, newest window first."""
        ...

    def _audit(self, namespace: str, entry: str | None, limit: int) -> list[AuditRecord]:
        """The newest `limit` (at least 1) audit records, newest first."""
        ...

    def _append_audit(self, namespace: str, event: AuditEvent) -> tuple[int, datetime]:
        """Append `event` at store now; return the new record's id and instant."""
        ...

    def _claim_extra(
        self, namespace: str, claims: Sequence[NewClaim], replica: Replica, reason: str
    ) -> Iterable[ClaimedRow]:
        """Insert a `claimed` row per claim (never empty) whose window has none; return
        the rows inserted, in the order of `claims`."""
        ...


class AdminAdapter:
    """`AdminStore.set_paused`, `history`, `audit`, `record_audit` and `claim_extra` (see
    `stores/base.py`) for a store that provides their hooks."""

    def set_paused(self: _AdminHooks, namespace: str, entry: str, pause: Pause) -> bool:
        return self._store_pause(namespace, entry, pause if pause.paused else Pause(False))

    def history(
        self: _AdminHooks, namespace: str, entry: str | None = None, limit: int = 100
    ) -> list[DispatchRecord]:
        return self._history(namespace, entry, limit) if limit > 0 else []

    def audit(
        self: _AdminHooks, namespace: str, entry: str | None = None, limit: int = 100
    ) -> list[AuditRecord]:
        return self._audit(namespace, entry, limit) if limit > 0 else []

    def record_audit(self: _AdminHooks, namespace: str, event: AuditEvent) -> AuditRecord:
        row_id, at = self._append_audit(namespace, event)
        return AuditRecord.of(row_id, at, event)

    def claim_extra(
        self: _AdminHooks,
        namespace: str,
        claims: Sequence[NewClaim],
        *,
        replica: Replica,
        reason: str,
    ) -> list[Claim]:
        if not claims:
            return []
        rows = self._claim_extra(namespace, claims, replica, reason)
        return [Claim(row_id, entry, window, task_id, 1) for row_id, entry, window, task_id in rows]
