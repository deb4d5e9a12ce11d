"""`due`: for one entry, which windows in `(after, now]` to dispatch and which to skip, under
its missed-window policy, grace, jitter and calendar."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from safebeat.windows.answer import Due, SkippedSpan, SkipReason
from safebeat.windows.counting import count_windows
from safebeat.windows.policy import Calendar, Jitter, Misfire, Policy
from safebeat.windows.rules import MICROSECOND, Rule
from safebeat.windows.sequence import latest_window, next_window


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
            now = held - MICROSECOND
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
            window = latest_window(rule, window - MICROSECOND, anchor)
        dispatch.reverse()
        passed_over = SkipReason.CATCHUP_LIMIT
    else:
        dispatch = [newest] if on_time(newest) else []
        passed_over = SkipReason.MISSED
    end = dispatch[0] - MICROSECOND if dispatch else newest
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
        newest_late = latest_window(rule, min(last, on_time_since - MICROSECOND), anchor)
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
