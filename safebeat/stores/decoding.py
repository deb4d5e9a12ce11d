"""Reading stored rows back one at a time: a row that cannot be decoded costs its own entry
(or its own line of history), never the namespace.

The boundary (`safebeat.limits`) keeps out what no store can hold, but a row written before
it existed (a pause ending in the year 10000, stored by an older safebeat), changed by
hand or by another client can still hold what Python cannot read. Every store decodes its
rows through these helpers:

- an entry state that cannot be read comes back as `unreadable_state`: its name, its
  problem and placeholders; beat puts the entry aside as broken (the planner gives it no
  window) and `safebeat status` says why, while every other entry keeps its windows;
- a history row that cannot be read comes back as `unreadable_record`, shown with its
  problem as the row's error;
- an audit record keeps the windows it can read and names, in its note, those it cannot.

A driver that converts a whole result at once (psycopg) is given loaders that return
`Unreadable` in place of a value they cannot convert (`safebeat.stores.postgres.loaders`),
so the rows around it still arrive and are decoded here one by one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import datetime, timezone
from typing import Any

from safebeat.errors import shorten
from safebeat.facts import Dispatched, LiveRun
from safebeat.records import AuditAction, AuditRecord, DispatchRecord, EntryState, Status

#: What a state or record that cannot be read holds in place of its instants.
PLACEHOLDER = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: What decoding a stored value raises when the value is not what safebeat wrote: a number
#: of microseconds beyond a datetime, text where a number belongs, JSON that is not a pause.
DECODE_ERRORS = (ValueError, OverflowError, TypeError, KeyError, AttributeError, IndexError)
#: The columns the SQL stores select for an entry state, in order (`state_of_columns`):
#: the entry's own, then its facts (`safebeat.facts`) as read from its dispatch rows.
STATE_COLUMNS = (
    "name",
    "anchor",
    "defined_at",
    "last_window",
    "digest",
    "schedule",
    "paused",
    "paused_until",
    "pause_note",
    "run_window",
    "run_started_at",
    "run_lease_until",
    "run_task_id",
    "dispatched_window",
    "dispatched_claimed_at",
    "dispatched_started_at",
)
#: The fields of a DispatchRecord, in the order the SQL stores select them.
RECORD_FIELDS = tuple(f.name for f in fields(DispatchRecord))


class Unreadable:
    """A stored value a driver could not convert (a timestamp after the year 9999), in the
    place of that value in its row: what a tolerant loader returns instead of raising."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"<unreadable {shorten(self.text)}>"


def unreadable_state(name: str, problem: str) -> EntryState:
    """The state of entry `name` whose stored state cannot be read: `problem` says why."""
    return EntryState(name, PLACEHOLDER, PLACEHOLDER, None, "", "", unreadable=problem)


def state_of(name: str, decode: Callable[[], EntryState]) -> EntryState:
    """`decode()`, or `unreadable_state` naming what it raised."""
    try:
        return decode()
    except DECODE_ERRORS as exc:
        return unreadable_state(name, problem_of(exc))


def state_of_row(row: Sequence[Any]) -> EntryState:
    """The state of a row of `STATE_COLUMNS` whose instants the driver converted (as
    PostgreSQL selects them), or `unreadable_state` if it could not convert one."""
    problem = unconverted(STATE_COLUMNS, row)
    if problem is not None:
        return unreadable_state(str(row[0]), problem)
    # Built here, not through `state_of_columns`: a claim round builds thousands.
    run = None if row[10] is None else LiveRun(row[9], row[10], row[11], row[12])
    newest = None if row[13] is None else Dispatched(row[13], row[14], row[15])
    return EntryState(
        row[0], row[1], row[2], row[3], row[4], row[5], run, row[6], row[7], row[8], newest
    )


def state_of_columns(row: Sequence[Any], instant: Callable[[Any], datetime]) -> EntryState:
    """The state of a row of `STATE_COLUMNS`, its instants read through `instant` (None
    stays None): the entry's values, and the facts its dispatch rows gave."""
    name, anchor, defined_at, last_window, digest, schedule, paused, until, note = row[:9]
    run_window, run_started, lease_until, task_id, window, claimed_at, started_at = row[9:16]
    run = None
    if run_started is not None:
        run = LiveRun(instant(run_window), instant(run_started), instant(lease_until), task_id)
    dispatched = None
    if window is not None:
        dispatched = Dispatched(instant(window), instant(claimed_at), _maybe(instant, started_at))
    return EntryState(
        name,
        instant(anchor),
        instant(defined_at),
        _maybe(instant, last_window),
        digest,
        schedule,
        run,
        bool(paused),
        _maybe(instant, until),
        note,
        dispatched,
    )


def _maybe(instant: Callable[[Any], datetime], value: Any) -> datetime | None:
    return None if value is None else instant(value)


def unconverted(columns: Sequence[str], row: Sequence[Any]) -> str | None:
    """What the first `Unreadable` value of `row` (whose values are `columns`) says, or None."""
    if Unreadable not in map(type, row):  # the common case, once per row of every read
        return None
    for column, value in zip(columns, row, strict=False):
        if type(value) is Unreadable:
            return f"its {column} holds {shorten(value.text)}, which Python cannot read"
    return None


def unreadable_record(row_id: int, entry: str, problem: str) -> DispatchRecord:
    """A history row that cannot be read: its id, entry and problem (as its error)."""
    return DispatchRecord(
        id=row_id,
        entry=entry,
        window=PLACEHOLDER,
        status=Status.FAILED,
        task_id=None,
        task_name=None,
        reason=None,
        skipped_from=None,
        skipped_count=None,
        replica="",
        host="",
        pid=0,
        claimed_at=PLACEHOLDER,
        sent_at=None,
        attempts=0,
        error=f"unreadable row: {problem}",
    )


def record_of(row_id: int, entry: str, decode: Callable[[], DispatchRecord]) -> DispatchRecord:
    """`decode()`, or `unreadable_record` naming what it raised."""
    try:
        return decode()
    except DECODE_ERRORS as exc:
        return unreadable_record(row_id, entry, problem_of(exc))


def record_of_row(row: Sequence[Any], decode: Callable[[], DispatchRecord]) -> DispatchRecord:
    """`decode()` of a row holding DispatchRecord's fields in order, or `unreadable_record`
    if the driver could not convert one of its values or `decode` fails."""
    problem = unconverted(RECORD_FIELDS, row)
    if problem is not None:
        return unreadable_record(int(row[0]), str(row[1]), problem)
    return record_of(int(row[0]), str(row[1]), decode)


def audit_record(row_id: int, at: object, row: Sequence[Any]) -> AuditRecord:
    """An audit record from a row's (actor, action, entry, windows, note), recorded at `at`.

    `windows` is the JSON list of ISO 8601 instants the SQL stores and Redis write (or the
    list a driver already decoded from it). Each window is read as a UTC instant; one that
    cannot be (written before the limits, past the year 9999 in UTC) is left out and named
    in the note, so the trail stays readable.
    """
    actor, action, entry, windows, note = row
    unread: list[str] = []
    try:
        listed = json.loads(windows) if isinstance(windows, str) else list(windows or ())
    except DECODE_ERRORS:
        listed, unread = [], [str(windows)]
    instants = []
    for text in listed:
        try:
            instants.append(datetime.fromisoformat(text).astimezone(timezone.utc))
        except DECODE_ERRORS:
            unread.append(str(text))
    if not isinstance(at, datetime):
        unread.append(f"its time {at!r}")
        at = PLACEHOLDER
    if unread:
        shown = ", ".join(shorten(text) for text in unread)
        note = f"{note + '; ' if note else ''}unreadable: {shown}"
    return AuditRecord(row_id, at, actor, AuditAction(action), entry, tuple(instants), note)


def problem_of(exc: BaseException) -> str:
    """What a decoding error says, shortened, for an unreadable state or record."""
    return f"{type(exc).__name__}: {shorten(str(exc), 200)}"
