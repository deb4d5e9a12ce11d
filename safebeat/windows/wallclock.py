"""Crontab windows: wall-clock slots in a time zone mapped onto UTC instants, across clock
changes (a slot in a repeated hour fires once, one in a skipped hour right after the gap)."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta, tzinfo

from safebeat.windows.rules import SECOND, UTC, CrontabRule

#: How far a crontab search walks (in days) before it decides the rule never matches.
MAX_CRONTAB_SEARCH_DAYS = 366 * 30
#: Longest repeated (autumn) hour we allow for when a zone's clocks go back.
_MAX_FOLD = timedelta(hours=3)


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
    lo, hi = 0, int((high - low) // SECOND)
    while lo < hi:
        mid = (lo + hi) // 2
        if (low + mid * SECOND).astimezone(tz).utcoffset() == after_offset:
            hi = mid
        else:
            lo = mid + 1
    return low + lo * SECOND


def crontab_latest(rule: CrontabRule, now: datetime) -> datetime | None:
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


def crontab_next(rule: CrontabRule, after: datetime) -> datetime | None:
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
