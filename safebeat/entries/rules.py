"""Celery's schedule objects (a number of seconds, a timedelta, `schedule`, `crontab`, `solar`,
a clocked time) read into window rules; safebeat reads their parsed fields and never
parses cron text itself."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo

from celery import schedules

from safebeat.crontab import seconds_of
from safebeat.entries.custom import custom_rule, stock_class
from safebeat.errors import EntryError, shorten, shown
from safebeat.limits import MAX_DURATION, LimitError, check_instant
from safebeat.windows import SOLAR_EVENTS, ClockedRule, CrontabRule, IntervalRule, Rule, SolarRule

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MAX_SECONDS = MAX_DURATION.total_seconds()


def compile_rule(name: str, value: object, *, relative: bool, zone: tzinfo) -> Rule:
    """The rule of entry `name`'s schedule `value`; a subclass of a Celery schedule that
    decides its own windows keeps deciding them (`safebeat.entries.custom`)."""
    rule = _stock_rule(name, value, relative=relative, zone=zone)
    stock = stock_class(value)
    return rule if stock is None else custom_rule(name, value, stock, rule, zone)


def _stock_rule(name: str, value: object, *, relative: bool, zone: tzinfo) -> Rule:
    if isinstance(value, bool):
        raise EntryError(name, f"schedule {value!r} is not a schedule")
    if isinstance(value, int | float):
        if not -_MAX_SECONDS <= value <= _MAX_SECONDS:  # also NaN, which compares false
            raise EntryError(
                name,
                f"schedule {shown(value)}: expected a number of seconds, at most "
                f"{_MAX_SECONDS:.0f} ({MAX_DURATION.days} days)",
            )
        value = timedelta(seconds=value)
    if isinstance(value, timedelta):
        return _interval(name, value, relative)
    if isinstance(value, schedules.crontab):
        return CrontabRule(
            minutes=tuple(sorted(value.minute)),
            hours=tuple(sorted(value.hour)),
            days_of_week=frozenset(value.day_of_week),
            days_of_month=frozenset(value.day_of_month),
            months_of_year=frozenset(value.month_of_year),
            tz=zone,
            seconds=tuple(sorted(seconds_of(value))),
        )
    if isinstance(value, schedules.solar):
        if value.event not in SOLAR_EVENTS:  # pragma: no cover - celery validates this too
            raise EntryError(name, f"unknown solar event {value.event!r}")
        return SolarRule(value.event, float(value.lat), float(value.lon))
    if isinstance(value, schedules.schedule):
        return _interval(name, value.run_every, relative or value.relative)
    clocked_time = getattr(value, "clocked_time", None)
    if isinstance(clocked_time, datetime):
        if clocked_time.tzinfo is None:
            clocked_time = clocked_time.replace(tzinfo=zone)
        try:
            return ClockedRule(check_instant(clocked_time, "clocked time"))
        except LimitError as exc:  # near datetime.min or max: no UTC instant every store holds
            raise EntryError(name, str(exc)) from None
    if isinstance(value, str):
        raise EntryError(
            name,
            f"schedule {shorten(value)} is text, which safebeat reads only for entries added at "
            "run time (safebeat.schedules.add); in beat_schedule, as for Celery's beat, write "
            "crontab(...) or a number of seconds",
        )
    raise EntryError(
        name,
        f"safebeat cannot compute windows for a {type(value).__name__} schedule; use a "
        "number of seconds, a timedelta, celery.schedules.schedule, crontab or solar",
    )


def _interval(name: str, every: timedelta, relative: bool) -> IntervalRule:
    if every <= timedelta(0):
        raise EntryError(name, f"an interval must be positive, got {every}")
    if every > MAX_DURATION:
        raise EntryError(name, f"an interval must be at most {MAX_DURATION.days} days, got {every}")
    return IntervalRule(every, anchor=_EPOCH if relative else None)
