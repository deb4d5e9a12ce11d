"""The search through a custom schedule's base windows for the ones it accepts, remembered.

A custom class (`FilteredRule`) is asked about its base schedule's windows one at a time,
and asking can be slow (Celery's crontab `is_due` takes about 0.15 ms): a class that accepts
none of a long run of windows costs seconds to search. So every search is remembered as a
span of base windows, all asked, with where a search through them ends: at a window found,
at "none within reach" (fruitless), or, for a search its caller's budget cut short, nowhere
yet (the next search resumes past it). Answers never change, so no window is asked twice:
a fruitless search costs its seconds once, not at every tick.

A caller that must not be held up (beat plans under the store's tick lock) sets a budget
with `search_budget`; a search that outruns it stops with `SearchUnfinished`, keeping what it
asked, and goes on from there when asked again.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime

#: The most windows of a custom schedule's base that one search asks the schedule about
#: (about five weeks of a crontab every minute): a schedule that accepts none of them has
#: no window within reach, which is reported rather than searched for ever.
MAX_FILTERED_SEARCH = 50_000
#: Spans a rule remembers in one direction before it forgets them all and starts again.
_MAX_SPANS = 10_000
#: Windows a search asks about before it looks at its budget, so each search progresses.
_ASKED_BEFORE_BUDGET = 16

_budget: ContextVar[Callable[[], bool] | None] = ContextVar("safebeat_search_budget", default=None)


class SearchUnfinished(ValueError):
    """A custom schedule's search outran its caller's budget; asked again, it resumes."""


def spent_after(seconds: float, clock: Callable[[], float] = time.monotonic) -> Callable[[], bool]:
    """A budget for `search_budget`: spent `seconds` after this call, by `clock`."""
    deadline = clock() + seconds
    return lambda: clock() > deadline


@contextmanager
def search_budget(spent: Callable[[], bool]) -> Iterator[None]:
    """Within this block, a search stops with `SearchUnfinished` once `spent()` is true
    (after asking a few windows, so that each search progresses)."""
    token = _budget.set(spent)
    try:
        yield
    finally:
        _budget.reset(token)


#: How a remembered search ended.
FOUND, FRUITLESS, UNFINISHED = "found", "fruitless", "unfinished"


@dataclass(frozen=True)
class Span:
    """Base windows `low`..`high` (in time order), all asked, none accepted but `found`.

    A search that reaches any of them ends as this one did (`end`): at `found` (None: the
    base schedule has no more windows), or with nothing within reach (`asked` windows in a
    row refused); one cut short by its budget resumes past its far end.
    """

    low: datetime
    high: datetime
    asked: int
    found: datetime | None
    end: str


class Spans:
    """The remembered spans of one direction (and anchor) of a rule: disjoint, by `low`.

    A compiled rule is shared (the console answers requests on several threads), so the
    two lists change together under a lock."""

    def __init__(self) -> None:
        self._lows: list[datetime] = []
        self._spans: list[Span] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._spans)

    def at(self, window: datetime) -> Span | None:
        """The span holding `window`, if any."""
        with self._lock:
            index = bisect.bisect_right(self._lows, window) - 1
            if index >= 0 and self._spans[index].high >= window:
                return self._spans[index]
            return None

    def record(self, span: Span, replaces: list[Span]) -> None:
        """Remember `span`, which holds the spans `replaces`."""
        with self._lock:
            for old in replaces:
                index = bisect.bisect_left(self._lows, old.low)
                if index < len(self._spans) and self._spans[index] is old:
                    del self._lows[index], self._spans[index]
            if len(self._spans) >= _MAX_SPANS:
                self._lows.clear()
                self._spans.clear()
            index = bisect.bisect_left(self._lows, span.low)
            if index < len(self._lows) and self._lows[index] == span.low:
                del self._lows[index], self._spans[index]  # asked again meanwhile
            self._lows.insert(index, span.low)
            self._spans.insert(index, span)


def search(
    spans: Spans,
    first: datetime | None,
    following: Callable[[datetime], datetime | None],
    keeps: Callable[[datetime], bool],
    *,
    forward: bool,
    fruitless: Callable[[int, datetime, datetime], str],
) -> datetime | None:
    """The first base window from `first` on (stepping with `following`, in the search's
    direction) that `keeps` accepts; None when the base schedule has no more windows.

    Raise ValueError (`fruitless(asked, low, high)`) when `MAX_FILTERED_SEARCH` windows in
    a row are refused, now or by a search remembered, and `SearchUnfinished` when the
    budget (`search_budget`) is spent first.
    """
    spent = _budget.get()
    window = first
    covered: list[Span] = []  # remembered spans this search went through
    near: datetime | None = None  # the first and the last base window it covered
    far: datetime | None = None
    asked = fresh = 0
    found: datetime | None = None
    end = FOUND
    while window is not None:
        span = spans.at(window)
        if span is not None:
            if near is None and span.end != UNFINISHED:
                return _remembered(span, fruitless)
            covered.append(span)
            near = near or (span.low if forward else span.high)
            far = span.high if forward else span.low
            asked += span.asked
            if span.end != UNFINISHED:
                found, end = span.found, span.end
                break
            window = following(far)
            continue
        if asked >= MAX_FILTERED_SEARCH:
            end = FRUITLESS
            break
        if spent is not None and fresh >= _ASKED_BEFORE_BUDGET and spent():
            end = UNFINISHED
            break
        asked += 1
        fresh += 1
        near = near or window
        far = window
        if keeps(window):
            found = window
            break
        window = following(window)
    if near is None or far is None:
        return None
    low, high = (near, far) if forward else (far, near)
    span = Span(low, high, asked, found, end)
    spans.record(span, covered)
    if end == UNFINISHED:
        raise SearchUnfinished(
            f"still searching ({asked} windows asked so far, from {near.isoformat()})"
        )
    return _remembered(span, fruitless)


def _remembered(span: Span, fruitless: Callable[[int, datetime, datetime], str]) -> datetime | None:
    if span.end == FRUITLESS:
        raise ValueError(fruitless(span.asked, span.low, span.high))
    return span.found
