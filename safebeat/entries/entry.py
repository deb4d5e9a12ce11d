"""One compiled schedule entry, and where its undecided windows begin."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from safebeat.records import Definition, EntryState
from safebeat.windows import BoundedRule, ClockedRule, Overlap, Policy, Rule


@dataclass(frozen=True, slots=True)
class Entry:
    """One compiled schedule entry: what to send, when, and under which policy."""

    name: str
    task: str
    rule: Rule
    policy: Policy
    schedule_text: str
    digest: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    overlap: Overlap = Overlap.ALLOW
    #: The earliest window this entry may dispatch (a django-celery-beat `start_time`).
    not_before: datetime | None = None
    #: Pause the entry after this many consecutive failed runs (the worker hook decides).
    pause_after_failures: int | None = None
    #: The zone the schedule speaks (its `timezone` option, else the app's): where a
    #: window's local date is told (`current_window().local_date`).
    zone: tzinfo = timezone.utc

    @property
    def definition(self) -> Definition:
        return Definition(self.name, self.schedule_text, self.digest)


def undecided_after(entry: Entry, state: EntryState) -> datetime:
    """The instant after which `entry`'s windows are still to be decided: the shared
    state's `decided_until`, but never before the entry's `not_before`.

    A one-off's single window counts even when it lies before the entry was registered
    (a django-celery-beat clocked task set for "now" is saved a moment before beat sees
    it): until it is decided, it is due, as stock beat runs it; its policy then dispatches
    it or records it as skipped.
    """
    after = state.decided_until
    rule = entry.rule.rule if isinstance(entry.rule, BoundedRule) else entry.rule
    if isinstance(rule, ClockedRule) and (state.last_window is None or state.last_window < rule.at):
        after = min(after, rule.at - timedelta(microseconds=1))
    if entry.not_before is not None:  # no window before the entry's start
        after = max(after, entry.not_before - timedelta(microseconds=1))
    return after
