"""What deploying a schedule would change in the store: `safebeat plan` and `prune --orphans`.

Compares the entries a Celery app's code defines (compiled as beat compiles them) with
the definitions registered in the store: entries added, entries removed (registered, but
no code defines them: orphans), entries changed (another digest), and entries beat
would skip as broken. For each, the next windows before and after, computed the way
beat computes them. Pure: the caller reads the store.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from safebeat import windows
from safebeat.entries.app_entries import Schedule
from safebeat.entries.text_reader import rule_from_text
from safebeat.identity import format_window
from safebeat.ops.overview import STATUS_SEARCH_SECONDS, ReplicaStatus
from safebeat.stores.protocols import EntryState
from safebeat.windows import Rule
from safebeat.windows.searches import SearchUnfinished, search_budget, spent_after

#: Schedules of entries run outside Celery (`safebeat exec`, the APScheduler executor):
#: no app defines them, so they are never orphans.
RUN_OUTSIDE_CELERY = ("exec ", "apscheduler ")


class Kind(str, enum.Enum):
    """How an entry differs between the code and the store."""

    ADDED = "added"  # defined by the code, not registered yet
    REMOVED = "removed"  # registered, defined by no code: an orphan
    CHANGED = "changed"  # registered with another definition
    BROKEN = "broken"  # defined by the code, but beat would skip it


@dataclass(frozen=True)
class Change:
    """One entry that a deploy of the code would change."""

    name: str
    kind: Kind
    before: str | None  # the schedule registered in the store
    after: str | None  # the schedule the code defines
    next_before: tuple[datetime, ...] = ()  # the next windows as registered
    next_after: tuple[datetime, ...] = ()  # the next windows as the code defines them
    problem: str | None = None  # why a broken entry is broken
    run_by: tuple[str, ...] = ()  # live replicas still running a removed entry

    @property
    def schedule_changed(self) -> bool:
        return self.before != self.after


def plan(
    states: Mapping[str, EntryState],
    schedule: Schedule,
    replicas: Sequence[ReplicaStatus],
    now: datetime,
    *,
    count: int = 3,
) -> list[Change]:
    """Every entry the code and the store disagree about, by name.

    `now` is the store's clock; `count` is how many next windows to show of each side.
    Custom schedules' searches share a budget, as in `safebeat status`: a window not
    found within it is left out.
    """
    with search_budget(spent_after(STATUS_SEARCH_SECONDS)):
        return _plan(states, schedule, replicas, now, count=count)


def _plan(
    states: Mapping[str, EntryState],
    schedule: Schedule,
    replicas: Sequence[ReplicaStatus],
    now: datetime,
    *,
    count: int,
) -> list[Change]:
    changes: list[Change] = []
    for name in sorted(states.keys() | schedule.entries.keys() | schedule.broken.keys()):
        state, entry = states.get(name), schedule.entries.get(name)
        if name in schedule.broken:
            changes.append(
                Change(
                    name,
                    Kind.BROKEN,
                    None if state is None else state.schedule,
                    None,
                    problem=schedule.broken[name].problem,
                )
            )
        elif state is None and entry is not None:
            anchor = now.replace(microsecond=0)  # what registering it would record
            try:
                after = _next(entry.rule, now, anchor, count)
            except Exception as exc:  # noqa: BLE001 - beat puts it aside: say why
                changes.append(_uncomputable(name, None, exc))
                continue
            changes.append(Change(name, Kind.ADDED, None, entry.schedule_text, (), after))
        elif state is not None and entry is None:
            if state.schedule.startswith(RUN_OUTSIDE_CELERY):
                continue
            running = tuple(
                r.record.replica for r in replicas if r.live and name in r.record.definitions
            )
            before = _registered_next(state, now, count)
            changes.append(Change(name, Kind.REMOVED, state.schedule, None, before, run_by=running))
        elif state is not None and entry is not None and state.digest != entry.digest:
            before = _registered_next(state, now, count)
            # A changed schedule is registered anew at deploy time: windows from now on.
            since = now if state.schedule != entry.schedule_text else max(now, state.decided_until)
            try:
                after = _next(entry.rule, since, state.anchor, count)
            except Exception as exc:  # noqa: BLE001 - beat puts it aside: say why
                changes.append(_uncomputable(name, state.schedule, exc))
                continue
            changes.append(
                Change(name, Kind.CHANGED, state.schedule, entry.schedule_text, before, after)
            )
        elif state is not None and entry is not None and state.unreadable is None:
            try:  # unchanged; but one whose windows fail is put aside by beat: say so
                _next(entry.rule, max(now, state.decided_until), state.anchor, 1)
            except Exception as exc:  # noqa: BLE001
                changes.append(_uncomputable(name, state.schedule, exc))
    return changes


def _uncomputable(name: str, registered: str | None, exc: Exception) -> Change:
    """Entry `name`, whose next windows cannot be computed: beat would put it aside."""
    detail = " ".join(str(exc).split()) or type(exc).__name__
    problem = f"its windows cannot be computed: {detail}"
    return Change(name, Kind.BROKEN, registered, None, problem=problem)


def orphans(changes: Sequence[Change]) -> list[Change]:
    """The removed entries that no live replica still runs: safe to forget."""
    return [c for c in changes if c.kind is Kind.REMOVED and not c.run_by]


def _registered_next(state: EntryState, now: datetime, count: int) -> tuple[datetime, ...]:
    """The next windows of the definition registered in the store (none if unreadable)."""
    rule = rule_from_text(state.schedule)
    if rule is None:
        return ()
    return _next(rule, max(now, state.decided_until), state.anchor, count)


def _next(rule: Rule, after: datetime, anchor: datetime, count: int) -> tuple[datetime, ...]:
    """The next `count` windows of `rule` (those found before a custom schedule's search
    outran its budget: beat searches on)."""
    found: list[datetime] = []
    try:
        window = windows.next_window(rule, after, anchor)
        while window is not None and len(found) < count:
            found.append(window)
            window = windows.next_window(rule, window, anchor)
    except SearchUnfinished:
        pass
    return tuple(found)


def describe_windows(found: Sequence[datetime]) -> str:
    """Windows for a line of text: `none` when the entry has no more."""
    return ", ".join(format_window(w) for w in found) if found else "none"
