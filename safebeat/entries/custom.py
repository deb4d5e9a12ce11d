"""Custom schedule classes: a subclass of Celery's `crontab` or `schedule` that decides for
itself (it overrides `is_due`, `remaining_estimate` or `remaining_delta`), the usual way to
write "workdays only" or a holiday rule.

Its windows are the windows of its base schedule (the crontab's slots, the interval's
grid) that the class answers due at. Each one is asked about on its own, as if beat were
checking at that very instant: `now()` is the window (in the entry's zone), and
`last_run_at` the base schedule's window before it, at which the base alone is always
due. So the answer depends on the window only, never on when a replica ticks or what it
ran before, and every replica agrees on every window. A class that cannot be asked so
faithfully (its answer changes with `last_run_at` where its base's does not, or from one
call to the next; it overrides `now`; its base is a solar schedule; it cannot be copied)
is refused by name at startup, never run as something else. docs/schedules.md states
the contract.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from celery import schedules

from safebeat import crontab as seconds_crontab
from safebeat.errors import EntryError
from safebeat.windows import (
    CrontabRule,
    FilteredRule,
    IntervalRule,
    Rule,
    latest_window,
    next_window,
)

#: Celery's schedule classes (and safebeat's crontab) whose windows safebeat computes itself.
_STOCK = (seconds_crontab.crontab, schedules.crontab, schedules.solar, schedules.schedule)
#: The methods whose answers make a schedule's windows: a subclass overriding one decides.
_DECIDING = ("is_due", "remaining_estimate", "remaining_delta", "now")
#: How many windows of its base a custom schedule is asked about at startup, to refuse one
#: whose answers safebeat could not reproduce.
PROBED_WINDOWS = 48
_MICROSECOND = timedelta(microseconds=1)


def stock_class(value: object) -> type | None:
    """The stock class of `value` if it is a subclass of one that decides its own windows
    (overrides a method of `_DECIDING`), else None (a stock schedule, or not a schedule)."""
    cls = type(value)
    stock = next((known for known in cls.__mro__ if known in _STOCK), None)
    if stock is None or stock is cls:
        return None
    if all(getattr(cls, method, None) is getattr(stock, method, None) for method in _DECIDING):
        return None
    return stock


def class_name(value: object) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"


def custom_rule(name: str, value: Any, stock: Any, base: Rule, zone: tzinfo) -> FilteredRule:
    """The rule of entry `name`, whose schedule `value` is a custom subclass of `stock`
    compiled (as `stock`) to `base`; raise EntryError if it cannot be honoured."""
    source = class_name(value)
    if not isinstance(base, IntervalRule | CrontabRule):
        raise EntryError(
            name,
            f"{source} decides its own windows, and safebeat honours that only for subclasses "
            "of celery.schedules.crontab or schedule (see docs/schedules.md); rather than run "
            "it as a plain schedule, the entry is not run",
        )
    if getattr(type(value), "now", None) is not getattr(stock, "now", None):
        raise EntryError(
            name,
            f"{source} overrides now(), so safebeat cannot ask it about a window's instant "
            "(see docs/schedules.md); decide from self.now() without overriding it",
        )
    if not hasattr(value, "__dict__"):
        raise EntryError(name, f"{source} cannot be copied to be asked about a window")
    previous = _previous(base)

    def answer(window: datetime, last_run_at: datetime, method: Callable[..., Any]) -> bool:
        asked = _copy_at(value, window.astimezone(zone), zone)
        try:
            reply = method(asked, last_run_at.astimezone(zone))
        except Exception as exc:
            detail = " ".join(str(exc).split())
            raise ValueError(
                f"{source}.is_due raised {type(exc).__name__} ({detail}) when asked about "
                f"the window {window.isoformat()}"
            ) from exc
        if not (isinstance(reply, tuple) and len(reply) == 2):
            raise ValueError(
                f"{source}.is_due answered {reply!r}; it must answer (is_due, next) like Celery's"
            )
        return bool(reply[0])

    def keeps(window: datetime) -> bool:
        return answer(window, previous(window), type(value).is_due)

    rule = FilteredRule(base, keeps, source)
    try:
        _probe(
            name,
            source,
            base=base,
            previous=previous,
            answer=answer,
            stock=stock,
            is_due=type(value).is_due,
        )
    except ValueError as exc:
        raise EntryError(name, f"{exc}; fix the class or the entry") from None
    return rule


def _previous(base: IntervalRule | CrontabRule) -> Callable[[datetime], datetime]:
    """The base schedule's window before a window of it: the `last_run_at` the custom class
    is asked with, at which the base schedule alone is due at the window."""
    if isinstance(base, IntervalRule):
        every = base.every
        return lambda window: window - every

    def before(window: datetime) -> datetime:
        found = latest_window(base, window - _MICROSECOND)
        return window - timedelta(days=1) if found is None else found

    return before


def _copy_at(value: Any, now: datetime, zone: tzinfo) -> Any:
    """A shallow copy of schedule `value` whose `now()` is `now`, and whose zone (Celery's
    `tz`, the app's by default) is the entry's, in which safebeat lays out its windows.
    The object itself is shared by threads and entries, so it is never changed."""
    copy = object.__new__(type(value))
    copy.__dict__.update(vars(value))
    copy.nowfun = lambda: now
    copy.__dict__["tz"] = zone  # over Celery's cached `tz` property
    return copy


def _probe(
    name: str,
    source: str,
    *,
    base: IntervalRule | CrontabRule,
    previous: Callable[[datetime], datetime],
    answer: Callable[[datetime, datetime, Callable[..., Any]], bool],
    stock: Any,
    is_due: Callable[..., Any],
) -> None:
    """Ask the class about its next windows as safebeat will, and as stock beat might
    (after an older last run); raise ValueError (or EntryError) if safebeat's way could
    not reproduce its answers: they change with `last_run_at` where the stock class's do
    not, or from one call to the next."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    anchor = now if isinstance(base, IntervalRule) else None
    window = now
    for _ in range(PROBED_WINDOWS):
        following = next_window(base, window, anchor)
        if following is None:
            return
        window = following
        last, older = previous(window), previous(previous(window))
        first = answer(window, last, is_due)
        if answer(window, last, is_due) != first:
            raise ValueError(f"{source}.is_due answers differently when asked twice")
        stock_alike = answer(window, last, stock.is_due) == answer(window, older, stock.is_due)
        if stock_alike and answer(window, older, is_due) != first:
            raise EntryError(
                name,
                f"{source}.is_due depends on last_run_at, which safebeat cannot honour "
                "faithfully: it asks each window of the base schedule with the window before "
                "it as last_run_at (see docs/schedules.md); decide from self.now() alone, or "
                "use a schedule whose windows say it (a crontab, an interval)",
            )
