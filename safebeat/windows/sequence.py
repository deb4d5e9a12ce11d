"""The window sequence of each rule: the newest window at or before an instant, the oldest
one after it, and the windows in between."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

from safebeat.windows.rules import (
    MICROSECOND,
    BoundedRule,
    ClockedRule,
    CrontabRule,
    FilteredRule,
    IntervalRule,
    Rule,
    SolarRule,
)
from safebeat.windows.searches import Spans, search
from safebeat.windows.solar import solar_latest, solar_next
from safebeat.windows.wallclock import crontab_latest, crontab_next


def latest_window(rule: Rule, now: datetime, anchor: datetime | None = None) -> datetime | None:
    """Return the newest window at or before `now`, or None if there is none."""
    if isinstance(rule, BoundedRule):
        until = now if rule.end is None else min(now, rule.end)
        window = latest_window(rule.rule, until, anchor)
        return None if window is None or (rule.start and window < rule.start) else window
    return _step(rule, now, anchor, forward=False)


def next_window(rule: Rule, after: datetime, anchor: datetime | None = None) -> datetime | None:
    """Return the oldest window strictly after `after`, or None if there is none."""
    if isinstance(rule, BoundedRule):
        since = after if rule.start is None else max(after, rule.start - MICROSECOND)
        window = next_window(rule.rule, since, anchor)
        return None if window is None or (rule.end and window > rule.end) else window
    return _step(rule, after, anchor, forward=True)


def _step(
    rule: IntervalRule | CrontabRule | SolarRule | ClockedRule | FilteredRule,
    instant: datetime,
    anchor: datetime | None,
    *,
    forward: bool,
) -> datetime | None:
    """The oldest window after `instant` (`forward`), else the newest at or before it."""
    if isinstance(rule, IntervalRule):
        return _interval_window(rule, instant, anchor, forward=forward)
    if isinstance(rule, FilteredRule):
        return _filtered_window(rule, instant, anchor, forward=forward)
    if isinstance(rule, CrontabRule):
        return crontab_next(rule, instant) if forward else crontab_latest(rule, instant)
    if isinstance(rule, SolarRule):
        return solar_next(rule, instant) if forward else solar_latest(rule, instant)
    if forward:
        return rule.at if rule.at > instant else None
    return rule.at if rule.at <= instant else None


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
    every = rule.every // MICROSECOND
    elapsed = (instant - base) // MICROSECOND
    steps = elapsed // every + 1 if forward else elapsed // every
    return base + timedelta(microseconds=steps * every)


def _filtered_window(
    rule: FilteredRule, instant: datetime, anchor: datetime | None, *, forward: bool
) -> datetime | None:
    """The oldest window of `rule.base` after `instant` that `rule.keeps` accepts
    (`forward`), else the newest at or before it; each base window is asked about once
    (`safebeat.windows.searches`)."""
    spans = rule.searched.get((forward, anchor))
    if spans is None:
        spans = rule.searched[forward, anchor] = Spans()

    def following(window: datetime) -> datetime | None:
        return _step(
            rule.base, window if forward else window - MICROSECOND, anchor, forward=forward
        )

    def fruitless(asked: int, low: datetime, high: datetime) -> str:
        return (
            f"{rule.source} accepts none of the {asked} windows of its base schedule "
            f"from {low.isoformat()} to {high.isoformat()}, and it is not searched further"
        )

    first = _step(rule.base, instant, anchor, forward=forward)
    return search(spans, first, following, rule.keeps, forward=forward, fruitless=fruitless)
