"""What the store says about each entry and replica, for `safebeat status` and the console.

Read-only: it calls `states`, `history` and `replicas` on the store, so it works on every
backend and while beat runs.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from safebeat import windows
from safebeat.display import when
from safebeat.entries import Entry
from safebeat.liveness import is_live
from safebeat.records import (
    AuditAction,
    DispatchRecord,
    EntryState,
    Outcome,
    ReplicaRecord,
    Status,
)
from safebeat.stores.protocols import AdminStore
from safebeat.windows.searches import SearchUnfinished, search_budget, spent_after

#: Seconds that the custom schedules' searches for next windows may take in one look at
#: the entries (`safebeat.windows.searches`): one accepting no window for weeks takes
#: seconds to search, and fifty of them made `safebeat status` take four minutes.
STATUS_SEARCH_SECONDS = 2.0
#: Rows of each entry's history read to find its latest dispatch, outcome and success.
HISTORY_DEPTH = 50
#: Most upcoming windows skip_next looks at for one without a row (earlier skips have
#: them): at most this many windows ahead of beat have a row.
SKIP_SEARCH = 1000


#: The reasons of windows an operator sent; their rows name the operator as the host.
OPERATOR_REASONS = frozenset({AuditAction.TRIGGER.value, AuditAction.BACKFILL.value})


@dataclass(frozen=True)
class EntryStatus:
    """One entry as the store sees it, with its next window where the schedule is known."""

    name: str
    schedule: str
    next_window: datetime | None
    last_window: datetime | None
    last_sent: DispatchRecord | None
    last_outcome: Outcome | None
    last_success: datetime | None
    running_since: datetime | None
    skipped_recently: int
    paused: bool  # paused at the store's now (a pause whose end passed is over)
    #: The oldest window that is due (at or before the store's now) and not decided yet:
    #: beat is behind on it. None when nothing is due, or without the entry's schedule.
    overdue_window: datetime | None = None
    paused_until: datetime | None = None  # where a pause in force ends by itself
    pause_note: str | None = None
    #: Why the store could not read this entry's state back (beat puts it aside), or None.
    unreadable: str | None = None
    #: Why its next window cannot be computed (beat puts it aside and retries), or None.
    uncomputable: str | None = None
    #: Its custom schedule refused every window asked within `STATUS_SEARCH_SECONDS`: its
    #: next window is not known yet (beat searches on, in steps).
    searching: bool = False

    @property
    def pause_text(self) -> str:
        """`paused`, `paused until <instant>`, each with ` (note)`; empty when not paused."""
        if not self.paused:
            return ""
        text = "paused" if self.paused_until is None else f"paused until {when(self.paused_until)}"
        return f"{text} ({self.pause_note})" if self.pause_note else text

    @property
    def next_window_skipped(self) -> bool:
        """Whether the next window falls inside the pause in force, so beat will skip it."""
        return (
            self.paused
            and self.next_window is not None
            and (self.paused_until is None or self.next_window < self.paused_until)
        )

    @property
    def sent_by(self) -> str | None:
        """The replica that sent the latest window; for an operator's `trigger` or
        `backfill`, who asked for it (`trigger by alice@ops-1`)."""
        if self.last_sent is None:
            return None
        if self.last_sent.reason in OPERATOR_REASONS:
            return f"{self.last_sent.reason} by {self.last_sent.host}"
        return self.last_sent.replica

    @property
    def lag(self) -> timedelta | None:
        """Time from the latest sent window to its publish."""
        sent = self.last_sent
        if sent is None or sent.sent_at is None:
            return None
        return sent.sent_at - sent.window


@dataclass(frozen=True)
class ReplicaStatus:
    """A replica's last heartbeat, how old it is (store clock), and whether it is live."""

    record: ReplicaRecord
    age: timedelta

    @property
    def live(self) -> bool:
        """Whether it heartbeated recently enough to count as running (safebeat.liveness)."""
        return is_live(self.record.heartbeat_at, self.record.heartbeat_at + self.age)


def entry_status(
    state: EntryState, rows: Sequence[DispatchRecord], entry: Entry | None, now: datetime
) -> EntryStatus:
    """Summarise one entry from its shared state and its newest history rows."""
    sent = next((r for r in rows if r.status is Status.SENT), None)
    finished = next((r for r in rows if r.outcome is not None), None)
    success = next(
        (r for r in rows if r.outcome is Outcome.SUCCESS and r.finished_at is not None), None
    )
    upcoming = overdue = uncomputable = None
    searching = False
    if entry is not None and state.unreadable is None:
        after = max(now, state.decided_until)
        try:
            upcoming = windows.next_window(entry.rule, after, state.anchor)
            ahead = {r.window for r in rows if r.status is Status.SKIPPED and r.window > after}
            while upcoming is not None and upcoming in ahead:  # skipped ahead: skip-next
                upcoming = windows.next_window(entry.rule, upcoming, state.anchor)
            first = windows.next_window(entry.rule, state.decided_until, state.anchor)
        except SearchUnfinished:  # a custom class refusing window after window: not known
            searching = True
        except Exception as exc:  # noqa: BLE001 - beat puts it aside the same way: say why
            uncomputable = " ".join(str(exc).split()) or type(exc).__name__
        else:
            overdue = first if first is not None and first <= now else None
    return EntryStatus(
        name=state.name,
        schedule=state.schedule,
        next_window=upcoming,
        last_window=state.last_window,
        last_sent=sent,
        last_outcome=None if finished is None else finished.outcome,
        last_success=None if success is None else success.finished_at,
        running_since=state.running_since,
        skipped_recently=sum(r.skipped_count or 1 for r in rows if r.status is Status.SKIPPED),
        paused=state.paused_at(now),
        overdue_window=overdue,
        paused_until=state.paused_until if state.paused_at(now) else None,
        pause_note=state.pause_note if state.paused_at(now) else None,
        unreadable=state.unreadable,
        uncomputable=uncomputable,
        searching=searching,
    )


def status_rows(
    store: AdminStore, namespace: str, state: EntryState, now: datetime
) -> list[DispatchRecord]:
    """The newest `HISTORY_DEPTH` history rows of an entry, or as many more as `skip-next`
    can have written ahead when every one of those is a window skipped ahead: the next
    window is after all of them, so `entry_status` needs them all."""
    rows = store.history(namespace, state.name, limit=HISTORY_DEPTH)
    after = max(now, state.decided_until)
    if len(rows) == HISTORY_DEPTH and all(
        r.status is Status.SKIPPED and r.window > after for r in rows
    ):
        return store.history(namespace, state.name, limit=HISTORY_DEPTH + SKIP_SEARCH)
    return rows


def entry_statuses(
    store: AdminStore, namespace: str, entries: Mapping[str, Entry] | None = None
) -> list[EntryStatus]:
    """Every registered entry of `namespace`, by name; `entries` adds next windows."""
    now = store.clock()
    states = store.states(namespace)
    with search_budget(spent_after(STATUS_SEARCH_SECONDS)):
        return [
            entry_status(
                state,
                status_rows(store, namespace, state, now),
                None if entries is None else entries.get(name),
                now,
            )
            for name, state in sorted(states.items())
        ]


def empty_namespace(store: AdminStore, namespace: str) -> str:
    """What to say when `namespace` has no registered entry: which namespaces exist, the
    ones closest to `namespace` (a typo) first."""
    others = closest_first(namespace, store.namespaces())
    if others:
        return (
            f"namespace {namespace!r} has no registered entries; {store.display_url} holds "
            f"{listed(others)}: choose one with --namespace"
        )
    return (
        f"namespace {namespace!r} has no registered entries, and {store.display_url} holds "
        "none: is beat running against this store?"
    )


def closest_first(name: str, names: Sequence[str]) -> list[str]:
    """`names` with those that look like `name` first, closest first; the others in order."""
    if not names:
        return []
    close = difflib.get_close_matches(name, names, n=len(names), cutoff=0.6)
    chosen = set(close)
    return [*close, *(n for n in names if n not in chosen)]


#: The most names a message lists; the rest are counted.
LISTED_AT_MOST = 10


def listed(names: Sequence[str]) -> str:
    """Names quoted and separated by commas, for a message: the first `LISTED_AT_MOST`,
    and how many more (a store shared by many apps holds hundreds of namespaces)."""
    shown = ", ".join(repr(n) for n in names[:LISTED_AT_MOST])
    more = len(names) - LISTED_AT_MOST
    return f"{shown} and {more} more" if more > 0 else shown


def replica_statuses(store: AdminStore, namespace: str) -> list[ReplicaStatus]:
    """Every replica that heartbeated within the retention, newest heartbeat first."""
    now = store.clock()
    return [ReplicaStatus(r, now - r.heartbeat_at) for r in store.replicas(namespace)]
