"""Pure time math: which scheduled windows are due, given a rule, the shared state and "now".

No I/O and no clock reads happen here: every function takes the instants it needs, so
every replica that asks the same question gets the same answer. A *window* is the
scheduled instant (an aware UTC datetime), never the moment some process happened to send.
"""

from __future__ import annotations

import bisect
import dataclasses
import enum
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from typing import TypeAlias

UTC = timezone.utc
_MICROSECOND = timedelta(microseconds=1)
_SECOND = timedelta(seconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: How far a crontab search walks (in days) before it decides the rule never matches.
MAX_CRONTAB_SEARCH_DAYS = 366 * 30
#: Longest repeated (autumn) hour we allow for when a zone's clocks go back.
_MAX_FOLD = timedelta(hours=3)
#: Counting skipped windows one by one stops here; the count is then reported as unknown.
MAX_COUNTED_SKIPS = 10_000
#: Counting a crontab's skipped windows stops after this many local days (unknown beyond).
MAX_COUNTED_DAYS = 400


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


@dataclass(frozen=True)
class BoundedRule:
    """The windows of `rule` from `start` until `end` (each optional, both included).

    Outside them the entry has no windows at all: none before `start`, and after `end`
    no next window, so the entry is done.
    """

    rule: IntervalRule | CrontabRule | SolarRule | ClockedRule
    start: datetime | None = None
    end: datetime | None = None


Rule: TypeAlias = IntervalRule | CrontabRule | SolarRule | ClockedRule | BoundedRule


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
        spread = self.spread // _MICROSECOND
        if spread <= 0:
            return timedelta(0)
        micros = (window - _EPOCH) // _MICROSECOND
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


class SkipReason(str, enum.Enum):
    """Why a window was recorded as skipped instead of dispatched."""

    MISSED = "missed"  # passed over: a later window of the same entry superseded it
    LATE = "late"  # later than the grace period allows
    CATCHUP_LIMIT = "catchup_limit"  # older than the newest `catchup_limit` missed windows
    CALENDAR = "calendar"  # on a day the entry's calendar excludes
    OVERLAP = "overlap"  # the entry's previous run was still running (overlap="forbid")
    PAUSED = "paused"  # the entry was paused (safebeat pause)
    QUEUED = "queued"  # the entry's previous window still waited in the queue (skip_if_queued)


@dataclass(frozen=True)
class SkippedSpan:
    """Consecutive windows skipped for one reason; `count` is None when too many to count."""

    first: datetime
    last: datetime
    count: int | None
    reason: SkipReason


@dataclass(frozen=True)
class Due:
    """The answer for one entry at one instant.

    `next_send` is when `next_window` is to be sent, when jitter delays it; `wake_at` is
    the instant to look at the entry again.
    """

    dispatch: tuple[datetime, ...]
    skipped: tuple[SkippedSpan, ...]
    next_window: datetime | None
    next_send: datetime | None = None

    @property
    def wake_at(self) -> datetime | None:
        """When this entry next has something to decide: its next window's send time."""
        return self.next_send if self.next_send is not None else self.next_window

    @property
    def last_window(self) -> datetime | None:
        """The newest window this answer decides about, dispatched or skipped."""
        candidates = [*self.dispatch, *(span.last for span in self.skipped)]
        return max(candidates) if candidates else None


# --- the window sequence of each rule -------------------------------------------------------


def latest_window(rule: Rule, now: datetime, anchor: datetime | None = None) -> datetime | None:
    """Return the newest window at or before `now`, or None if there is none."""
    if isinstance(rule, BoundedRule):
        until = now if rule.end is None else min(now, rule.end)
        window = latest_window(rule.rule, until, anchor)
        return None if window is None or (rule.start and window < rule.start) else window
    if isinstance(rule, IntervalRule):
        return _interval_window(rule, now, anchor, forward=False)
    if isinstance(rule, CrontabRule):
        return _crontab_latest(rule, now)
    if isinstance(rule, SolarRule):
        return _solar_latest(rule, now)
    return rule.at if rule.at <= now else None


def next_window(rule: Rule, after: datetime, anchor: datetime | None = None) -> datetime | None:
    """Return the oldest window strictly after `after`, or None if there is none."""
    if isinstance(rule, BoundedRule):
        since = after if rule.start is None else max(after, rule.start - _MICROSECOND)
        window = next_window(rule.rule, since, anchor)
        return None if window is None or (rule.end and window > rule.end) else window
    if isinstance(rule, IntervalRule):
        return _interval_window(rule, after, anchor, forward=True)
    if isinstance(rule, CrontabRule):
        return _crontab_next(rule, after)
    if isinstance(rule, SolarRule):
        return _solar_next(rule, after)
    return rule.at if rule.at > after else None


def typical_period(rule: Rule, now: datetime | None = None) -> timedelta | None:
    """The time between two consecutive windows: `every`, or for other rules the gap
    between the next two windows after `now`; None for a rule with fewer than two left."""
    base = rule.rule if isinstance(rule, BoundedRule) else rule
    if isinstance(base, IntervalRule):
        return base.every
    start = now or datetime.now(timezone.utc)
    first = next_window(rule, start)
    second = None if first is None else next_window(rule, first)
    return None if first is None or second is None else second - first


def windows_between(
    rule: Rule, after: datetime, until: datetime, anchor: datetime | None = None
) -> Iterator[datetime]:
    """Yield the windows in `(after, until]`, oldest first."""
    window = next_window(rule, after, anchor)
    while window is not None and window <= until:
        yield window
        window = next_window(rule, window, anchor)


def _interval_window(
    rule: IntervalRule, instant: datetime, anchor: datetime | None, *, forward: bool
) -> datetime:
    base = rule.anchor or anchor
    if base is None:
        raise ValueError("an interval rule needs an anchor (the store persists one per entry)")
    every = rule.every // _MICROSECOND
    elapsed = (instant - base) // _MICROSECOND
    steps = elapsed // every + 1 if forward else elapsed // every
    return base + timedelta(microseconds=steps * every)


# --- crontab: wall-clock slots mapped onto UTC instants -------------------------------------


def wall_to_instant(wall: datetime, tz: tzinfo) -> datetime:
    """Map a naive wall-clock time in `tz` to the UTC instant its slot fires at.

    A time that exists once maps to itself. A time in the repeated hour after clocks go
    back maps to its first occurrence, so the slot fires once. A time in the hour skipped
    when clocks go forward maps to the first instant after the gap.
    """
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    if first <= second:
        return first
    return _gap_end(tz, low=second, high=first)


def _gap_end(tz: tzinfo, *, low: datetime, high: datetime) -> datetime:
    """Return the first instant in (low, high] whose offset is the post-transition one."""
    after_offset = high.astimezone(tz).utcoffset()
    lo, hi = 0, int((high - low) // _SECOND)
    while lo < hi:
        mid = (lo + hi) // 2
        if (low + mid * _SECOND).astimezone(tz).utcoffset() == after_offset:
            hi = mid
        else:
            lo = mid + 1
    return low + lo * _SECOND


def _crontab_latest(rule: CrontabRule, now: datetime) -> datetime | None:
    local = now.astimezone(rule.tz)
    limit = local.replace(tzinfo=None, microsecond=0)
    if local.fold:
        # In the repeated hour, slots a little later on the wall clock already fired
        # (their first occurrence is in the past), so look as far ahead as it repeats.
        wall = local.replace(tzinfo=None)
        first, again = (wall.replace(tzinfo=rule.tz, fold=f).utcoffset() for f in (0, 1))
        repeat = first - again if first is not None and again is not None else _MAX_FOLD
        limit += min(max(repeat, timedelta(0)), _MAX_FOLD)
    day = limit.date()
    for _ in range(MAX_CRONTAB_SEARCH_DAYS):
        if rule.matches_day(day):
            for wall in _slots_descending(rule, day, limit):
                instant = wall_to_instant(wall, rule.tz)
                if instant <= now:
                    return instant
        day -= timedelta(days=1)
    return None


def _crontab_next(rule: CrontabRule, after: datetime) -> datetime | None:
    start = after.astimezone(rule.tz).replace(tzinfo=None, microsecond=0)
    day = start.date()
    for _ in range(MAX_CRONTAB_SEARCH_DAYS):
        if rule.matches_day(day):
            for wall in _slots_ascending(rule, day, start):
                instant = wall_to_instant(wall, rule.tz)
                if instant > after:
                    return instant
        day += timedelta(days=1)
    return None


def _slots_descending(rule: CrontabRule, day: date, limit: datetime) -> Iterator[datetime]:
    """The slots of `day` at or before the wall-clock time `limit`, newest first."""
    hours, minutes, seconds = rule.hours, rule.minutes, rule.seconds
    today = day == limit.date()
    if today:
        hours = hours[: bisect.bisect_right(hours, limit.hour)]
    for hour in reversed(hours):
        this_hour = today and hour == limit.hour
        hour_minutes = minutes
        if this_hour:
            hour_minutes = minutes[: bisect.bisect_right(minutes, limit.minute)]
        for minute in reversed(hour_minutes):
            minute_seconds = seconds
            if this_hour and minute == limit.minute:
                minute_seconds = seconds[: bisect.bisect_right(seconds, limit.second)]
            for second in reversed(minute_seconds):
                yield datetime.combine(day, time(hour, minute, second))


def _slots_ascending(rule: CrontabRule, day: date, start: datetime) -> Iterator[datetime]:
    """The slots of `day` at or after the wall-clock time `start`, oldest first."""
    hours, minutes, seconds = rule.hours, rule.minutes, rule.seconds
    today = day == start.date()
    if today:
        hours = hours[bisect.bisect_left(hours, start.hour) :]
    for hour in hours:
        this_hour = today and hour == start.hour
        hour_minutes = minutes
        if this_hour:
            hour_minutes = minutes[bisect.bisect_left(minutes, start.minute) :]
        for minute in hour_minutes:
            minute_seconds = seconds
            if this_hour and minute == start.minute:
                minute_seconds = seconds[bisect.bisect_left(seconds, start.second) :]
            for second in minute_seconds:
                yield datetime.combine(day, time(hour, minute, second))


# --- solar events ---------------------------------------------------------------------------

_SOLAR_EVENTS = {
    # event: (ephem method suffix, horizon, use the sun's centre)
    "dawn_astronomical": ("rising", "-18", True),
    "dawn_nautical": ("rising", "-12", True),
    "dawn_civil": ("rising", "-6", True),
    "sunrise": ("rising", "-0:34", False),
    "solar_noon": ("transit", "0", False),
    "sunset": ("setting", "-0:34", False),
    "dusk_civil": ("setting", "-6", True),
    "dusk_nautical": ("setting", "-12", True),
    "dusk_astronomical": ("setting", "-18", True),
}
SOLAR_EVENTS = frozenset(_SOLAR_EVENTS)
#: Days searched for an event that does not happen every day (polar day and night).
_SOLAR_SEARCH_DAYS = 366


#: Where each kind of event sits in the local mean day, shifted away from midnight:
#: risings fall between antitransit and transit (00-12 h local mean time), settings
#: between transit and antitransit (12-24 h), transits near noon.
_SOLAR_DAY_SHIFT = {
    "rising": timedelta(hours=6),
    "setting": timedelta(hours=-6),
    "transit": timedelta(0),
}
_DAY = timedelta(days=1)
_HOUR = timedelta(hours=1)


def _solar_event(rule: SolarRule, start: datetime, *, forward: bool) -> datetime | None:
    """Find the event after (or before) `start`, as an instant rounded to the second.

    ephem's answer for one event moves by a tenth of a second with the instant its
    search starts from, enough to round to different seconds. So the event is solved
    again from a start that depends only on the event's local mean day: every replica,
    whenever it asks, gets the same window.
    """
    import ephem  # noqa: PLC0415 - optional dependency, only solar entries need it

    kind, horizon, use_center = _SOLAR_EVENTS[rule.event]
    observer = ephem.Observer()
    observer.lat, observer.lon = str(rule.lat), str(rule.lon)
    observer.elev, observer.pressure, observer.horizon = 0, 0, horizon
    sun = ephem.Sun()
    kwargs = {"use_center": True} if use_center else {}
    direction = "next" if forward else "previous"
    find = getattr(observer, f"{direction}_{kind}")
    step = getattr(observer, f"{direction}_antitransit")
    cursor = ephem.Date(start.astimezone(UTC).replace(tzinfo=None))
    for _ in range(_SOLAR_SEARCH_DAYS):
        try:
            found = find(sun, start=cursor, **kwargs).datetime().replace(tzinfo=UTC)
        except ephem.CircumpolarError:
            cursor = step(sun, start=cursor)
            continue
        local_mean = timedelta(hours=rule.lon / 15) + _SOLAR_DAY_SHIFT[kind]
        day_start = _EPOCH + ((found + local_mean - _EPOCH) // _DAY) * _DAY - local_mean
        canonical_start = ephem.Date(day_start.replace(tzinfo=None))
        event = getattr(observer, f"next_{kind}")(sun, start=canonical_start, **kwargs)
        return _round_to_second(event.datetime().replace(tzinfo=UTC))
    return None


def _round_to_second(instant: datetime) -> datetime:
    rounded = instant.replace(microsecond=0)
    return rounded + _SECOND if instant.microsecond >= 500_000 else rounded


def _solar_latest(rule: SolarRule, now: datetime) -> datetime | None:
    cursor = now + _SECOND
    for _ in range(3):
        event = _solar_event(rule, cursor, forward=False)
        if event is None or event <= now:
            return event
        cursor = event - _SECOND
    return None


def _solar_next(rule: SolarRule, after: datetime) -> datetime | None:
    cursor = after - _SECOND
    for _ in range(3):
        event = _solar_event(rule, cursor, forward=True)
        if event is None or event > after:
            return event
        cursor = event + _SECOND
    return None


# --- policies -------------------------------------------------------------------------------


def due(
    rule: Rule,
    *,
    after: datetime,
    now: datetime,
    policy: Policy,
    anchor: datetime | None = None,
) -> Due:
    """Decide, for one entry, which windows in `(after, now]` to dispatch and which to skip.

    `after` is the newest window already decided (dispatched or skipped) or the moment
    the entry's definition was registered, so nothing fires as a surprise at startup.
    Every window in `(after, now]` appears exactly once in the answer: dispatched or
    inside a skipped span. Policies, for windows that passed unseen:

    - `latest`: dispatch only the newest, skip the rest as `missed`;
    - `skip`: like `latest`, but the newest too is skipped when it is later than `grace`
      (60 s when `grace` is not set), so beat resumes at the next future window;
    - `all`: dispatch every one, the newest `catchup_limit` at most (older: `catchup_limit`).

    With `grace` set, a window later than `grace` is never dispatched (skipped as `late`).

    With `policy.jitter`, a window is due only from its send time (the window plus its
    offset); from the first window still waiting on, nothing is decided yet, and lateness
    counts from the send time (grace plus the jitter's spread). With `policy.calendar`,
    a window to dispatch that falls on an excluded day is skipped as `calendar`.
    """
    clock, next_send = now, None
    if policy.jitter is not None:
        held = _first_held(rule, after=after, now=now, jitter=policy.jitter, anchor=anchor)
        if held is not None:  # decide nothing from the first window not yet to be sent
            now = held - _MICROSECOND
    upcoming = next_window(rule, max(after, now), anchor)
    if policy.jitter is not None and upcoming is not None:
        next_send = policy.jitter.send_time(upcoming)
    newest = latest_window(rule, now, anchor)
    if newest is None or newest <= after:
        return Due((), (), upcoming, next_send)
    grace = policy.effective_grace
    on_time_since = None if grace is None else clock - grace

    def on_time(window: datetime) -> bool:
        return on_time_since is None or window >= on_time_since

    dispatch: list[datetime] = []
    if policy.misfire is Misfire.ALL:
        window: datetime | None = newest
        while (
            window is not None
            and window > after
            and len(dispatch) < policy.catchup_limit
            and on_time(window)
        ):
            dispatch.append(window)
            window = latest_window(rule, window - _MICROSECOND, anchor)
        dispatch.reverse()
        passed_over = SkipReason.CATCHUP_LIMIT
    else:
        dispatch = [newest] if on_time(newest) else []
        passed_over = SkipReason.MISSED
    end = dispatch[0] - _MICROSECOND if dispatch else newest
    skipped = _skipped_spans(
        rule,
        after=after,
        end=end,
        on_time_since=on_time_since,
        passed_over=passed_over,
        anchor=anchor,
    )
    decision = Due(tuple(dispatch), tuple(skipped), upcoming, next_send)
    return decision if policy.calendar is None else _excluded(decision, policy.calendar)


def _first_held(
    rule: Rule, *, after: datetime, now: datetime, jitter: Jitter, anchor: datetime | None
) -> datetime | None:
    """The oldest window in `(after, now]` whose send time is still to come, if any.

    Only windows of the last `jitter.spread` can be waiting, so the walk is bounded by
    the windows in that span.
    """
    window = next_window(rule, max(after, now - jitter.spread), anchor)
    while window is not None and window <= now:
        if jitter.send_time(window) > now:
            return window
        window = next_window(rule, window, anchor)
    return None


def _excluded(decision: Due, calendar: Calendar) -> Due:
    """`decision` with the windows to dispatch that fall on excluded days skipped as
    `calendar`: one span per run of consecutive excluded windows."""
    keep: list[datetime] = []
    spans: list[SkippedSpan] = []
    run: list[datetime] = []
    for window in (*decision.dispatch, None):
        if window is not None and calendar.excludes(window):
            run.append(window)
            continue
        if run:
            spans.append(SkippedSpan(run[0], run[-1], len(run), SkipReason.CALENDAR))
            run = []
        if window is not None:
            keep.append(window)
    if not spans:
        return decision
    return dataclasses.replace(decision, dispatch=tuple(keep), skipped=(*decision.skipped, *spans))


def forbid_overlap(decision: Due, *, running_since: datetime | None) -> Due:
    """Apply `overlap="forbid"` to one entry's answer.

    While the entry has a live run (`running_since`: the start of its newest unfinished
    run whose lease is alive, as the store reports it), nothing is dispatched: the
    windows `decision` would dispatch are skipped as `overlap`. Otherwise at most the
    newest one is dispatched, since two windows sent at once would run side by side;
    older ones are skipped as `overlap`. A run whose lease expired (its worker died) is
    not live, whatever its age, so it blocks nothing.
    """
    dispatch = decision.dispatch
    if not dispatch:
        return decision
    keep = () if running_since is not None else dispatch[-1:]
    blocked = dispatch[: len(dispatch) - len(keep)]
    if not blocked:
        return decision
    # Due windows are consecutive windows of the rule, so one span describes them exactly.
    span = SkippedSpan(blocked[0], blocked[-1], len(blocked), SkipReason.OVERLAP)
    return dataclasses.replace(decision, dispatch=keep, skipped=(*decision.skipped, span))


def skip_if_queued(
    decision: Due, *, queued_since: datetime | None, now: datetime, timeout: timedelta
) -> Due:
    """Apply `overlap="skip_if_queued"` to one entry's answer.

    While the entry's newest dispatched window, claimed at `queued_since`, waits for a
    worker (no worker started it) and was claimed less than `timeout` ago, nothing is
    dispatched: the windows `decision` would dispatch are skipped as `queued`, so a
    stalled queue does not fill with copies. Otherwise at most the newest one is
    dispatched (older ones would only queue behind it), older ones skipped as `queued`. A
    window queued for longer than `timeout` is presumed lost (expired, purged) and blocks
    nothing.
    """
    dispatch = decision.dispatch
    if not dispatch:
        return decision
    queued = queued_since is not None and now - queued_since < timeout
    keep = () if queued else dispatch[-1:]
    blocked = dispatch[: len(dispatch) - len(keep)]
    if not blocked:
        return decision
    # Due windows are consecutive windows of the rule, so one span describes them exactly.
    span = SkippedSpan(blocked[0], blocked[-1], len(blocked), SkipReason.QUEUED)
    return dataclasses.replace(decision, dispatch=keep, skipped=(*decision.skipped, span))


def paused(decision: Due) -> Due:
    """A paused entry's answer: every window `decision` would dispatch is skipped as `paused`,
    so resuming later never sends the windows that passed meanwhile."""
    if not decision.dispatch:
        return decision
    # Due windows are consecutive windows of the rule, so one span describes them exactly.
    first, last = decision.dispatch[0], decision.dispatch[-1]
    span = SkippedSpan(first, last, len(decision.dispatch), SkipReason.PAUSED)
    return dataclasses.replace(decision, dispatch=(), skipped=(*decision.skipped, span))


def _skipped_spans(
    rule: Rule,
    *,
    after: datetime,
    end: datetime,
    on_time_since: datetime | None,
    passed_over: SkipReason,
    anchor: datetime | None,
) -> list[SkippedSpan]:
    """Describe the windows in `(after, end]` as spans: the late ones, then the passed-over ones.

    Lateness only grows with age, so the late windows are always the oldest.
    """
    last = latest_window(rule, end, anchor)
    if last is None or last <= after:
        return []
    first = next_window(rule, after, anchor)
    assert first is not None  # noqa: S101 - `last` lies after `after`, so a window follows it
    spans: list[SkippedSpan] = []
    if on_time_since is not None:
        newest_late = latest_window(rule, min(last, on_time_since - _MICROSECOND), anchor)
        if newest_late is not None and newest_late > after:
            spans.append(_span(rule, anchor, first, newest_late, SkipReason.LATE))
            following = next_window(rule, newest_late, anchor)
            if following is None or following > last:
                return spans
            first = following
    spans.append(_span(rule, anchor, first, last, passed_over))
    return spans


def _span(
    rule: Rule, anchor: datetime | None, first: datetime, last: datetime, reason: SkipReason
) -> SkippedSpan:
    return SkippedSpan(first, last, count_windows(rule, first, last, anchor), reason)


def count_windows(
    rule: Rule, first: datetime, last: datetime, anchor: datetime | None = None
) -> int | None:
    """Count the windows in `[first, last]` (both windows), with work bounded per rule.

    Intervals and crontabs are counted exactly by arithmetic: a crontab one local day at a
    time, whatever its number of slots, for at most MAX_COUNTED_DAYS days. Solar events and
    one-offs are counted one window at a time, at most MAX_COUNTED_SKIPS of them. None means
    the span was too long to count within those bounds.
    """
    if isinstance(rule, BoundedRule):  # `first` and `last` are windows, so within the bounds
        return count_windows(rule.rule, first, last, anchor)
    if isinstance(rule, IntervalRule):
        return (last - first) // rule.every + 1
    if isinstance(rule, CrontabRule):
        return _count_crontab(rule, first, last)
    return _count_stepwise(rule, first, last, anchor, limit=MAX_COUNTED_SKIPS)


def _count_stepwise(
    rule: Rule, first: datetime, last: datetime, anchor: datetime | None, *, limit: int
) -> int | None:
    """Count the windows in `[first, last]` one at a time; None past `limit` of them."""
    count = 0
    for _ in windows_between(rule, first - _MICROSECOND, last, anchor):
        count += 1
        if count > limit:
            return None
    return count


def _count_crontab(rule: CrontabRule, first: datetime, last: datetime) -> int | None:
    """Count a crontab's windows in `[first, last]`, one local day (or hour) per step.

    Over a stretch of wall-clock time whose UTC offset holds throughout (and since the
    instant before it), each matching slot is one window at its wall-clock time less that
    offset, so the slots between two wall-clock times are counted with two binary
    searches. A day where the clocks change is taken an hour at a time, and only the
    hours the change falls in, and any repeated stretch after clocks go back, are walked
    window by window (at most 3,600 windows an hour, with seconds). The work is bounded by
    the days counted, at most MAX_COUNTED_DAYS.
    """
    tz = rule.tz
    total = 0
    cursor = first
    block_start = datetime.combine(first.astimezone(tz).date(), time())
    block = _DAY
    limit = block_start + MAX_COUNTED_DAYS * _DAY
    while cursor <= last:
        if block_start >= limit:
            return None
        steady = _steady_offset(tz, block_start, block)
        if steady is None and block == _DAY:
            block = _HOUR  # look at the day of a clock change hour by hour
            continue
        if steady is None:
            stop = wall_to_instant(block_start + block, tz)
            if stop > cursor:
                total += _windows_in(rule, cursor, min(last, stop - _MICROSECOND))
                cursor = stop
        else:
            start, offset = steady
            end = start + block
            if cursor < start:  # a repeated stretch that belongs to no block of its own
                total += _windows_in(rule, cursor, min(last, start - _MICROSECOND))
                cursor = start
                continue
            if cursor < end and rule.matches_day(block_start.date()):
                since = _naive(cursor - _MICROSECOND + offset)
                upto = _naive(min(last, end - _MICROSECOND) + offset)
                day = block_start.date()
                total += _slots_until(rule, day, upto) - _slots_until(rule, day, since)
            cursor = max(cursor, end)
        block_start += block
        if block_start.hour == 0:
            block = _DAY
    return total


def _windows_in(rule: CrontabRule, first: datetime, last: datetime) -> int:
    """Count the windows in `[first, last]` (at most a day long) one by one."""
    count = 0
    window = _crontab_next(rule, first - _MICROSECOND)
    while window is not None and window <= last:
        count += 1
        window = _crontab_next(rule, window)
    return count


def _steady_offset(
    tz: tzinfo, wall: datetime, length: timedelta
) -> tuple[datetime, timedelta] | None:
    """The instant the naive wall-clock time `wall` shows and the UTC offset there, if that
    offset holds from just before it until `length` later; None if the clocks change."""
    offset = wall.replace(tzinfo=tz).utcoffset()
    if offset is None:
        return None
    start = wall.replace(tzinfo=UTC) - offset
    for probe in (start - _MICROSECOND, start, start + length - _MICROSECOND):
        if probe.astimezone(tz).utcoffset() != offset:
            return None
    return start, offset


def _naive(instant: datetime) -> datetime:
    return instant.replace(tzinfo=None)


def _slots_until(rule: CrontabRule, day: date, local: datetime) -> int:
    """How many slots of `day` (a day the rule matches) fall at or before the wall-clock
    time `local`."""
    if local.date() < day:
        return 0
    hours, minutes, seconds = rule.hours, rule.minutes, rule.seconds
    per_hour = len(minutes) * len(seconds)
    if local.date() > day:
        return len(hours) * per_hour
    whole_hours = bisect.bisect_left(hours, local.hour)
    count = whole_hours * per_hour
    if whole_hours < len(hours) and hours[whole_hours] == local.hour:
        whole_minutes = bisect.bisect_left(minutes, local.minute)
        count += whole_minutes * len(seconds)
        if whole_minutes < len(minutes) and minutes[whole_minutes] == local.minute:
            count += bisect.bisect_right(seconds, local.second)
    return count
