"""Each entry's schedule health as the store knows it, and its namespace's totals: what
`safebeat exporter` serves, so that alerts read the store, not a replica's memory.

Bounded, read-only, on every backend: one `states` read (every entry), one `history` read
of the namespace's newest `recent_rows` rows (unsent claims, latest outcomes), and one
`history` read per entry detailed (at most `max_entries` of them). The rules come from
`ops.overview`, as `safebeat status` shows them.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from safebeat import windows
from safebeat.entries import Entry
from safebeat.ops.overview import HISTORY_DEPTH
from safebeat.records import DispatchRecord, EntryState, Outcome, Status
from safebeat.stores.protocols import AdminStore
from safebeat.windows.rules import MICROSECOND


@dataclass(frozen=True)
class EntryHealth:
    """One entry's facts, as instants of the store's clock (None: none yet, or not known)."""

    name: str
    #: The newest window decided, sent or skipped, by any replica.
    last_window: datetime | None
    last_sent_window: datetime | None
    #: The oldest window not decided yet: past means beat is behind on it. None when the
    #: entry is paused with no end, has no window left (an `end`, a one-off that ran), or
    #: its schedule is unknown here (not in the app's schedule, unreadable).
    next_due: datetime | None
    paused: bool
    paused_until: datetime | None
    last_success: datetime | None
    last_failure: datetime | None


@dataclass(frozen=True)
class NamespaceHealth:
    """A namespace's totals (every entry) and the entries detailed (at most the cap)."""

    namespace: str
    now: datetime
    entries: int
    #: Entries whose next due window is more than the grace in the past.
    overdue: int
    #: Entries whose latest finished run failed, among the namespace's newest rows read.
    failing: int
    paused: int
    #: Entries whose state the store cannot read back, or whose definition is broken.
    broken: int
    #: Claims older than the claim timeout never confirmed sent, among the newest rows read.
    unsent_claims: int
    #: The start of the oldest run whose lease is alive, or None.
    oldest_live_run: datetime | None
    detailed: tuple[EntryHealth, ...]
    #: Entries left out of `detailed` by the cap.
    omitted: int


def next_due(state: EntryState, entry: Entry | None, now: datetime) -> datetime | None:
    """The oldest window of `entry` not decided yet, past a pause in force; None when the
    pause has no end, no window is left, or the schedule is unknown."""
    if entry is None or state.unreadable is not None:
        return None
    after = state.decided_until
    if state.paused_at(now):
        if state.paused_until is None:
            return None
        # A window at the pause's end is no longer paused (EntryState.paused_at).
        after = max(after, state.paused_until - MICROSECOND)
    return windows.next_window(entry.rule, after, state.anchor)


def latest_outcomes(rows: Sequence[DispatchRecord]) -> dict[str, DispatchRecord]:
    """Each entry's newest row with an outcome, from rows newest window first."""
    latest: dict[str, DispatchRecord] = {}
    for row in rows:
        if row.outcome is not None and row.entry not in latest:
            latest[row.entry] = row
    return latest


def entry_health(
    state: EntryState, due: datetime | None, rows: Sequence[DispatchRecord], now: datetime
) -> EntryHealth:
    """One entry from its state, its next due window and its newest history rows."""

    def newest(*, outcome: Outcome) -> datetime | None:
        return next((r.finished_at for r in rows if r.outcome is outcome and r.finished_at), None)

    sent = next((r.window for r in rows if r.status is Status.SENT), None)
    paused = state.paused_at(now)
    return EntryHealth(
        name=state.name,
        last_window=state.last_window,
        last_sent_window=sent,
        next_due=due,
        paused=paused,
        paused_until=state.paused_until if paused else None,
        last_success=newest(outcome=Outcome.SUCCESS),
        last_failure=newest(outcome=Outcome.FAILURE),
    )


class DueWindows:
    """`next_due` of each entry, remembered while its inputs stay the same: a reading every
    interval computes again only the entries whose state or definition moved."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[tuple[object, ...], datetime | None]] = {}

    def of(
        self, states: Mapping[str, EntryState], entries: Mapping[str, Entry], now: datetime
    ) -> dict[str, datetime | None]:
        """Each entry's next due window at `now`; forgets the entries no longer registered."""
        known, self._known = self._known, {}
        dues: dict[str, datetime | None] = {}
        for name, state in states.items():
            entry = entries.get(name)
            key = (
                None if entry is None else entry.digest,
                state.decided_until,
                state.anchor,
                state.paused_at(now),
                state.paused_until,
                state.unreadable,
            )
            before = known.get(name)
            due = (
                before[1]
                if before is not None and before[0] == key
                else next_due(state, entry, now)
            )
            self._known[name] = (key, due)
            dues[name] = due
        return dues


def namespace_health(
    store: AdminStore,
    namespace: str,
    entries: Mapping[str, Entry],
    *,
    broken: int = 0,
    grace: timedelta,
    claim_timeout: timedelta,
    max_entries: int,
    recent_rows: int,
    remembered: DueWindows | None = None,
) -> NamespaceHealth:
    """Read `namespace`'s health from `store`; `entries` are the schedule's (next windows),
    `broken` the entries whose definition failed to load, `remembered` the due windows of
    the previous reading. Details at most `max_entries` entries (0: none): overdue ones
    first, then failing, then paused, then by name."""
    now = store.clock()
    states = store.states(namespace)
    recent = store.history(namespace, limit=recent_rows)
    outcomes = latest_outcomes(recent)
    dues = (remembered or DueWindows()).of(states, entries, now)
    late = now - grace
    overdue = {name for name, due in dues.items() if due is not None and due < late}
    failing = {name for name, row in outcomes.items() if row.outcome is Outcome.FAILURE}
    failing &= states.keys()
    paused = {name for name, state in states.items() if state.paused_at(now)}
    chosen = heapq.nsmallest(
        max(max_entries, 0),
        states,
        key=lambda n: (n not in overdue, n not in failing, n not in paused, n),
    )
    detailed = tuple(
        entry_health(
            states[name], dues[name], store.history(namespace, name, limit=HISTORY_DEPTH), now
        )
        for name in chosen
    )
    running = [s.running_since for s in states.values() if s.running_since is not None]
    return NamespaceHealth(
        namespace=namespace,
        now=now,
        entries=len(states),
        overdue=len(overdue),
        failing=len(failing),
        paused=len(paused),
        broken=broken + sum(s.unreadable is not None for s in states.values()),
        unsent_claims=sum(
            r.status is Status.CLAIMED and now - r.claimed_at > claim_timeout for r in recent
        ),
        oldest_live_run=min(running, default=None),
        detailed=detailed,
        omitted=len(states) - len(detailed),
    )
