"""How one entry's windows are decided: the missed-window policy, calendars of excluded days,
jitter and the overlap modes."""

from __future__ import annotations

import bisect
import enum
import hashlib
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo

from safebeat.windows.rules import EPOCH, MICROSECOND


class Misfire(str, enum.Enum):
    """What to do with windows that passed while no replica could dispatch them."""

    LATEST = "latest"
    SKIP = "skip"
    ALL = "all"


@dataclass(frozen=True)
class YearlyDays:
    """`length` days from `month`/`day`, every `interval` years from `first_year` (until
    `last_year`, if set). A start that a year lacks (29 February) does not happen that year."""

    month: int
    day: int
    length: int = 1
    first_year: int = 1
    last_year: int | None = None
    interval: int = 1

    def covers(self, day: date) -> bool:
        """Whether `day` is one of these days (a span may start the year before)."""
        for year in (day.year - 1, day.year):
            if year < self.first_year or (year - self.first_year) % self.interval:
                continue
            if self.last_year is not None and year > self.last_year:
                continue
            try:
                start = date(year, self.month, self.day)
            except ValueError:
                continue
            if start <= day < start + timedelta(days=self.length):
                return True
        return False


@dataclass(frozen=True)
class Calendar:
    """Days on which an entry's windows are skipped (reason `calendar`), as dates in `tz`.

    `ranges` are (first, last) days, both excluded, sorted by first day; `yearly` are
    days that come back every year (a public holiday).
    """

    tz: tzinfo
    ranges: tuple[tuple[date, date], ...] = ()
    yearly: tuple[YearlyDays, ...] = ()

    def excludes(self, window: datetime) -> bool:
        """Whether `window` falls on an excluded day of the calendar's time zone."""
        day = window.astimezone(self.tz).date()
        started = bisect.bisect_right(self.ranges, (day, date.max))  # ranges from day or before
        if any(last >= day for _, last in self.ranges[:started]):
            return True
        return any(yearly.covers(day) for yearly in self.yearly)


@dataclass(frozen=True)
class Jitter:
    """Send each window `offset(window)` after it, in `[0, spread)`, the same on every replica.

    `key` names the entry in its namespace; the offset is a hash of the key and the
    window, so it differs from window to window and entry to entry, never from replica
    to replica.
    """

    spread: timedelta
    key: str

    def offset(self, window: datetime) -> timedelta:
        spread = self.spread // MICROSECOND
        if spread <= 0:
            return timedelta(0)
        micros = (window - EPOCH) // MICROSECOND
        digest = hashlib.sha256(f"{self.key}\x00{micros}".encode()).digest()
        # The top 64 bits of the hash, scaled into [0, spread): uniform to within 2**-40.
        return timedelta(microseconds=(int.from_bytes(digest[:8], "big") * spread) >> 64)

    def send_time(self, window: datetime) -> datetime:
        """When `window` is sent: the window plus its offset."""
        return window + self.offset(window)


#: How late a window may be and still count as on time under `misfire="skip"` without `grace`.
SKIP_DEFAULT_GRACE = timedelta(seconds=60)


@dataclass(frozen=True)
class Policy:
    """How one entry's windows are decided: the missed-window policy, the days excluded
    by a calendar, and the jitter that delays each window's send time."""

    misfire: Misfire = Misfire.LATEST
    grace: timedelta | None = None
    catchup_limit: int = 100
    calendar: Calendar | None = None
    jitter: Jitter | None = None

    @property
    def effective_grace(self) -> timedelta | None:
        grace = self.grace
        if grace is None and self.misfire is Misfire.SKIP:
            grace = SKIP_DEFAULT_GRACE
        if grace is not None and self.jitter is not None:
            grace += self.jitter.spread  # a window is on time until grace after its send time
        return grace


class Overlap(str, enum.Enum):
    """Whether a window may be dispatched while the entry's previous one has not finished:
    `forbid` while its run is running, `skip_if_queued` while it waits in the queue (sent,
    not started by any worker)."""

    ALLOW = "allow"
    FORBID = "forbid"
    SKIP_IF_QUEUED = "skip_if_queued"
