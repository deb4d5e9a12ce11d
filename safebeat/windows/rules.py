"""The rules an entry's windows follow (interval, crontab, solar, one-off, bounded), and the
units the window math counts in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone, tzinfo
from typing import Any, TypeAlias

UTC = timezone.utc
MICROSECOND = timedelta(microseconds=1)
SECOND = timedelta(seconds=1)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class IntervalRule:
    """Windows at `anchor + k * every` for every integer k.

    `anchor` is fixed by the entry (a start time, or the epoch for Celery's
    `relative=True`); when it is None the store's persisted anchor is used.
    """

    every: timedelta
    anchor: datetime | None = None

    def __post_init__(self) -> None:
        if self.every <= timedelta(0):
            raise ValueError(f"an interval must be positive, got {self.every}")


@dataclass(frozen=True)
class CrontabRule:
    """Wall-clock slots in `tz`, with Celery's semantics (all fields must match; Sunday = 0).

    `seconds` are the seconds of each minute a slot falls on: `(0,)`, a slot on the minute,
    unless the entry uses `safebeat.crontab.crontab(second=...)`.
    """

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days_of_week: frozenset[int]
    days_of_month: frozenset[int]
    months_of_year: frozenset[int]
    tz: tzinfo
    seconds: tuple[int, ...] = (0,)

    def matches_day(self, day: date) -> bool:
        return (
            day.month in self.months_of_year
            and day.day in self.days_of_month
            and (day.weekday() + 1) % 7 in self.days_of_week
        )


@dataclass(frozen=True)
class SolarRule:
    """A solar event (Celery's `solar` names) at a place; windows are its instants (to 1 s)."""

    event: str
    lat: float
    lon: float


@dataclass(frozen=True)
class ClockedRule:
    """A single window at a fixed instant (a one-off)."""

    at: datetime


@dataclass(frozen=True, eq=False)
class FilteredRule:
    """The windows of `base` that `keeps` accepts: a custom schedule class's own answer
    (`safebeat.entries.custom`), asked at each window of the class's base schedule.

    `keeps` must be deterministic: it is asked about one instant at a time, by every
    replica, in any order, and its answer for an instant must never change. `source`
    names the deciding class, for the entry's canonical text. Compared by identity (one
    rule per entry), since `keeps` cannot be compared by value.
    """

    base: IntervalRule | CrontabRule
    keeps: Callable[[datetime], bool]
    source: str
    #: What searches already worked out (`safebeat.windows.searches`), by direction and
    #: anchor: spans of base windows all asked, and where a search through them ends. The
    #: answers never change, so a search is never redone, found or fruitless.
    searched: dict[tuple[bool, datetime | None], Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class BoundedRule:
    """The windows of `rule` from `start` until `end` (each optional, both included).

    Outside them the entry has no windows at all: none before `start`, and after `end`
    no next window, so the entry is done.
    """

    rule: IntervalRule | CrontabRule | SolarRule | ClockedRule | FilteredRule
    start: datetime | None = None
    end: datetime | None = None


Rule: TypeAlias = IntervalRule | CrontabRule | SolarRule | ClockedRule | FilteredRule | BoundedRule
