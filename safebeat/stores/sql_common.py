"""Pieces shared by the SQL backends: lock keys, state rows, the result of a tick, and
audit records."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any, TypeAlias

from safebeat.identity import Replica
from safebeat.records import AuditAction, AuditEvent, AuditRecord, TickPlan


def advisory_key(*parts: str) -> int:
    """Return a stable signed 64-bit key for PostgreSQL advisory locks."""
    digest = hashlib.sha256("\x1f".join(("safebeat", *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def replica_columns(replica: Replica) -> dict[str, object]:
    """The columns that say which replica wrote a row (dispatches, heartbeats)."""
    return {"replica": replica.id, "host": replica.host, "pid": replica.pid}


#: Columns of a new dispatch row, in the order `dispatch_rows` yields them.
DISPATCH_COLUMNS = (
    "entries",
    "windows",
    "statuses",
    "task_ids",
    "task_names",
    "reasons",
    "skipped_from",
    "skipped_counts",
)

DispatchRow: TypeAlias = tuple[
    str, datetime, str, str | None, str | None, str | None, datetime | None, int | None
]


def dispatch_rows(plan: TickPlan) -> list[DispatchRow]:
    """The dispatch rows a plan inserts, claims first (see DISPATCH_COLUMNS)."""
    rows: list[DispatchRow] = [
        (c.entry, c.window, "claimed", c.task_id, c.task_name, None, None, None)
        for c in plan.claims
    ]
    rows.extend(
        (s.entry, s.window, "skipped", None, None, s.reason, s.first, s.count) for s in plan.skips
    )
    return rows


def as_columns(rows: list[DispatchRow]) -> dict[str, list[object]]:
    """Transpose rows into {column: values}, for one `unnest()` insert."""
    return {name: [row[i] for row in rows] for i, name in enumerate(DISPATCH_COLUMNS)}


def audit_columns(namespace: str, event: AuditEvent) -> dict[str, object]:
    """The columns of a new audit row; its windows as a JSON list of ISO 8601 instants."""
    return {
        "namespace": namespace,
        "actor": event.actor,
        "action": event.action.value,
        "entry": event.entry,
        "windows": json.dumps([w.isoformat() for w in event.windows]),
        "note": event.note,
    }


def audit_record(id: int, at: datetime, row: Any) -> AuditRecord:
    """An audit record from a row's (actor, action, entry, windows, note); `windows` is the
    JSON text `audit_columns` wrote, or the list a driver already decoded from it."""
    actor, action, entry, windows, note = row
    listed = json.loads(windows) if isinstance(windows, str) else windows
    return AuditRecord(
        id,
        at,
        actor,
        AuditAction(action),
        entry,
        tuple(datetime.fromisoformat(w) for w in listed),
        note,
    )
