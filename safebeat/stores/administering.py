"""The operator tools' side of a store written once: `AdminAdapter` states the
`AdminStore` methods whose signature, guard and record are the same in every backend, over
one narrow hook each that a backend fills with its I/O.

The rules kept here: a resume stores no end and no note; a read of `limit` < 1 rows, or a
write of no windows, asks the backend nothing; an audit row and a written window become
their records (`AuditRecord`, `WrittenRow`) here, from what the backend wrote, and an extra
claim is a written window claimed (`claim_extra` over `write_windows`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Protocol

from safebeat.facts import WindowRow, WrittenRow
from safebeat.identity import Replica
from safebeat.records import AuditEvent, AuditRecord, Claim, DispatchRecord, NewClaim, Pause


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

    def _write_windows(
        self, namespace: str, rows: Sequence[WindowRow], replica: Replica
    ) -> Iterable[int | None]:
        """Insert a row per window of `rows` (never empty) that has none, claimed or
        skipped (`WindowRow`), claimed at store now by `replica`; return, in the order of
        `rows`, each one's new row id, or None where its window had a row (or an earlier
        row of `rows` took it)."""
        ...


class AdminAdapter:
    """`AdminStore.set_paused`, `history`, `audit`, `record_audit`, `write_windows` and
    `claim_extra` (see `stores/protocols.py`) for a store that provides their hooks."""

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

    def write_windows(
        self: _AdminHooks, namespace: str, rows: Sequence[WindowRow], *, replica: Replica
    ) -> list[WrittenRow]:
        if not rows:
            return []
        ids = self._write_windows(namespace, rows, replica)
        return [WrittenRow(i, row) for i, row in zip(ids, rows, strict=True) if i is not None]

    def claim_extra(
        self: _AdminHooks,
        namespace: str,
        claims: Sequence[NewClaim],
        *,
        replica: Replica,
        reason: str,
    ) -> list[Claim]:
        rows = [WindowRow(c.entry, c.window, reason, c.task_id, c.task_name) for c in claims]
        return claims_of(AdminAdapter.write_windows(self, namespace, rows, replica=replica))


def claims_of(written: Iterable[WrittenRow]) -> list[Claim]:
    """The claims among `written` (`attempts` 1: nothing published them yet)."""
    return [
        Claim(w.id, w.row.entry, w.row.window, w.row.task_id, 1)
        for w in written
        if w.row.task_id is not None
    ]
