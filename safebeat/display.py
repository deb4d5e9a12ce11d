"""How instants, durations and history rows read for people: the CLI and the web console.

One wording for both, so `safebeat history` and the console's history page say the same.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from datetime import datetime, timedelta

from safebeat.identity import format_window
from safebeat.stores.protocols import DispatchRecord, Status


class BadInstant(ValueError):
    """A date or time given by an operator that is no ISO 8601 instant with a zone.

    `zoneless`: it is a date or time, but names no zone (so no instant).
    """

    def __init__(self, message: str, *, zoneless: bool = False) -> None:
        super().__init__(message)
        self.zoneless = zoneless


def printable(text: str) -> str:
    """`text` safe to print on a terminal: each character that is not printable (a
    newline, ESC, another control character, a bidirectional override) as its escape,
    `\\n`, `\\x1b`, `\\u202e`, so a name cannot add rows or colours to a table.
    Backslashes stay as they are."""
    if text.isprintable():
        return text
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in text
    )


def one_line(text: str) -> str:
    """`text` on one line: a driver's multi-line message joined with "; ", and any other
    character that is not printable escaped (see `printable`)."""
    return printable("; ".join(line.strip() for line in str(text).splitlines() if line.strip()))


def when(instant: datetime | None) -> str:
    """An instant as ISO 8601 UTC with `Z`, or `-` for none."""
    return "-" if instant is None else format_window(instant)


def span(duration: timedelta | None) -> str:
    """A duration in its largest useful unit (`1.5s`, `3m07s`, `2h05m`, `7d`), or `-`."""
    if duration is None:
        return "-"
    seconds = duration.total_seconds()
    if abs(seconds) >= 2 * 86400 and seconds % 86400 == 0:
        return f"{int(seconds // 86400)}d"
    if abs(seconds) < 60:
        return f"{seconds:.1f}s"
    if abs(seconds) < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def lag(record: DispatchRecord) -> timedelta | None:
    """From a row's window to its publish, or None if it was never sent."""
    return None if record.sent_at is None else record.sent_at - record.window


def note(record: DispatchRecord) -> str:
    """Why a row is as it is: its skip reason and span, its origin, its error or duplicates."""
    if record.reason and record.status is Status.SKIPPED:
        count = "many" if record.skipped_count is None else str(record.skipped_count)
        return f"{record.reason}: {count} window(s) from {when(record.skipped_from)}"
    notes = [record.reason] if record.reason else []  # trigger, backfill, exec, apscheduler
    if record.error:
        notes.append(record.error.splitlines()[0][:80])
    elif record.duplicates:
        notes.append(f"{record.duplicates} duplicate delivery(ies) skipped")
    return "; ".join(notes)


def attempts(record: DispatchRecord) -> str:
    """How many times a window was published (`-` for a skipped one, never published)."""
    return "-" if record.status is Status.SKIPPED else str(record.attempts)


def unknown_entry(entry: str, known: Iterable[str], namespace: str) -> str:
    """That `entry` is not in `namespace`, with the closest known name as a hint."""
    close = difflib.get_close_matches(entry, list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"no entry {entry!r} in namespace {namespace!r}{hint}"


def parse_instant(value: str) -> datetime:
    """An ISO 8601 instant with a zone (`Z` or an offset); BadInstant says what is wrong."""
    try:
        instant = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise BadInstant(
            f"{value!r} is not an ISO 8601 date or time, e.g. 2026-03-01T06:00:00Z"
        ) from None
    if instant.tzinfo is None:
        raise BadInstant(
            f"{value!r} has no time zone; add Z (UTC) or an offset such as +03:00", zoneless=True
        )
    return instant
