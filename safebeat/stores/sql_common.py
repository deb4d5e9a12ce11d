"""Pieces shared by the SQL backends: lock keys, state rows, the result of a tick, and
audit rows (read back by `safebeat.stores.decoding.audit_record`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import TypeAlias

from safebeat.facts import WindowRow
from safebeat.identity import Replica, format_window
from safebeat.records import AuditEvent, StaleMark, TickPlan


def advisory_key(*parts: str) -> int:
    """Return a stable signed 64-bit key for PostgreSQL advisory locks."""
    digest = hashlib.sha256("\x1f".join(("safebeat", *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


#: Where a take-over pass without `Reclaim.after` starts reading: before every claim.
FIRST_STALE = StaleMark(datetime(1970, 1, 1, tzinfo=timezone.utc), 0)


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


def window_rows(rows: Iterable[WindowRow]) -> list[DispatchRow]:
    """The dispatch rows of `rows` (see DISPATCH_COLUMNS): claimed with a task id, else
    skipped, a span of its one window."""
    return [
        (r.entry, r.window, "claimed", r.task_id, r.task_name, r.reason, None, None)
        if r.task_id is not None
        else (r.entry, r.window, "skipped", None, None, r.reason, r.window, 1)
        for r in rows
    ]


def ids_in_order(
    rows: Iterable[WindowRow], inserted: dict[tuple[str, datetime], int]
) -> list[int | None]:
    """The id of each of `rows` in `inserted` (by entry and window), None for a row not
    inserted or whose window an earlier row of `rows` took."""
    ids: list[int | None] = []
    for row in rows:
        ids.append(inserted.pop((row.entry, row.window), None))
    return ids


def as_columns(rows: list[DispatchRow]) -> dict[str, list[object]]:
    """Transpose rows into {column: values}, for one `unnest()` insert."""
    return {name: [row[i] for row in rows] for i, name in enumerate(DISPATCH_COLUMNS)}


def as_array_literals(rows: list[DispatchRow]) -> dict[str, str]:
    """`as_columns`, each column as one PostgreSQL array literal (see `array_literal`)."""
    return {
        name: array_literal([row[i] for row in rows]) for i, name in enumerate(DISPATCH_COLUMNS)
    }


def array_literal(values: Iterable[str | datetime | int | None]) -> str:
    """`values` as the text of a PostgreSQL array, `{"a",NULL,"2026-03-01T12:00:00Z"}`, for a
    parameter cast to an array type. A client-side binding cursor quotes a list element by
    element, several times slower than this for the thousands of values of a burst."""
    return "{" + ",".join(map(_array_element, values)) + "}"


def _array_element(value: str | datetime | int | None) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        return format_window(value)  # UTC, no character to escape; a burst repeats a few
    if isinstance(value, int):
        return str(value)
    if "\\" in value or '"' in value:
        value = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{value}"'


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
