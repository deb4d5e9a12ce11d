"""Counting the windows of a span with bounded work: intervals and crontabs by arithmetic,
solar events and one-offs one window at a time up to a limit."""

from __future__ import annotations

import bisect
from datetime import date, datetime, time, timedelta, tzinfo

from safebeat.windows.rules import (
    DAY,
    HOUR,
    MICROSECOND,
    UTC,
    BoundedRule,
    CrontabRule,
    IntervalRule,
    Rule,
)
from safebeat.windows.sequence import windows_between
from safebeat.windows.wallclock import crontab_next, wall_to_instant

#: Counting skipped windows one by one stops here; the count is then reported as unknown.
MAX_COUNTED_SKIPS = 10_000
#: Counting a crontab's skipped windows stops after this many local days (unknown beyond).
MAX_COUNTED_DAYS = 400


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
    for _ in windows_between(rule, first - MICROSECOND, last, anchor):
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
    block = DAY
    limit = block_start + MAX_COUNTED_DAYS * DAY
    while cursor <= last:
        if block_start >= limit:
            return None
        steady = _steady_offset(tz, block_start, block)
        if steady is None and block == DAY:
            block = HOUR  # look at the day of a clock change hour by hour
            continue
        if steady is None:
            stop = wall_to_instant(block_start + block, tz)
            if stop > cursor:
                total += _windows_in(rule, cursor, min(last, stop - MICROSECOND))
                cursor = stop
        else:
            start, offset = steady
            end = start + block
            if cursor < start:  # a repeated stretch that belongs to no block of its own
                total += _windows_in(rule, cursor, min(last, start - MICROSECOND))
                cursor = start
                continue
            if cursor < end and rule.matches_day(block_start.date()):
                since = _naive(cursor - MICROSECOND + offset)
                upto = _naive(min(last, end - MICROSECOND) + offset)
                day = block_start.date()
                total += _slots_until(rule, day, upto) - _slots_until(rule, day, since)
            cursor = max(cursor, end)
        block_start += block
        if block_start.hour == 0:
            block = DAY
    return total


def _windows_in(rule: CrontabRule, first: datetime, last: datetime) -> int:
    """Count the windows in `[first, last]` (at most a day long) one by one."""
    count = 0
    window = crontab_next(rule, first - MICROSECOND)
    while window is not None and window <= last:
        count += 1
        window = crontab_next(rule, window)
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
    for probe in (start - MICROSECOND, start, start + length - MICROSECOND):
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
