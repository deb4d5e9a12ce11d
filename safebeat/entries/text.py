"""The canonical text of a rule (`describe`: equal text, equal windows), the one the store
keeps as an entry's definition; `safebeat.entries.text_reader` reads it back."""

from __future__ import annotations

import re
from datetime import timedelta, timezone, tzinfo
from decimal import Decimal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from safebeat.identity import format_window
from safebeat.windows import BoundedRule, CrontabRule, FilteredRule, IntervalRule, Rule, SolarRule


def describe(rule: Rule) -> str:
    """Return a canonical text of a rule: equal text, equal windows."""
    if isinstance(rule, BoundedRule):
        text = describe(rule.rule)
        if rule.start is not None:
            text += f" not before {format_window(rule.start)}"
        if rule.end is not None:
            text += f" not after {format_window(rule.end)}"
        return text
    if isinstance(rule, FilteredRule):
        return f"{describe(rule.base)} as {rule.source} decides"
    if isinstance(rule, IntervalRule):
        every = f"every {seconds_text(rule.every)}s"
        return every if rule.anchor is None else f"{every} from {format_window(rule.anchor)}"
    if isinstance(rule, CrontabRule):
        fields = crontab_fields(rule)
        if rule.seconds != (0,):  # six fields, seconds first; five as before otherwise
            fields = f"{_cron_field(rule.seconds, 0, 59)} {fields}"
        return f"crontab {fields} in {zone_name(rule.tz)}"
    if isinstance(rule, SolarRule):
        return f"solar {rule.event} at {_number_text(rule.lat)},{_number_text(rule.lon)}"
    return f"once at {format_window(rule.at)}"


def crontab_fields(rule: CrontabRule) -> str:
    """The five cron fields of a crontab rule (minute hour day month weekday, Sunday 0),
    without its seconds and zone."""
    return " ".join(
        (
            _cron_field(rule.minutes, 0, 59),
            _cron_field(rule.hours, 0, 23),
            _cron_field(rule.days_of_month, 1, 31),
            _cron_field(rule.months_of_year, 1, 12),
            _cron_field(rule.days_of_week, 0, 6),
        )
    )


def seconds_text(duration: timedelta) -> str:
    """A duration in seconds, exact to the microsecond: the short form (`60`, `0.25`,
    `1e+06`) that earlier versions wrote whenever it is exact, so existing entries keep
    their text; the full decimal (`1000001`, `123456.789`) where that form rounded."""
    micro = duration // timedelta(microseconds=1)
    short = f"{micro / 1_000_000:g}"
    if Decimal(short) * 1_000_000 == micro:
        return short
    whole, fraction = divmod(micro, 1_000_000)
    return f"{whole}.{fraction:06d}".rstrip("0") if fraction else str(whole)


def _number_text(value: float) -> str:
    """A coordinate exactly: the short form when it is exact, else Python's round-trip repr."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def zone_of(schedule: str) -> tzinfo | None:
    """The time zone a schedule text made by `describe` names, or None where it has none.

    Only crontab rules have a zone of their own; intervals, solar events and one-off
    times are instants, whatever zone they were written in.
    """
    match = _CRONTAB_ZONE.search(schedule)
    if match is None:
        return None
    if match[1] == "UTC":
        return timezone.utc
    try:
        return ZoneInfo(match[1])
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None  # a zone `describe` could only show by str(): not a name to look up


# Five fields, or six with seconds; bounds (" not before ...") may follow the zone.
_CRONTAB_ZONE = re.compile(r"\bcrontab (?:\S+ ){5,6}in (\S+)")


def zone_name(zone: tzinfo) -> str:
    """A zone's IANA name where it has one (`Europe/Moscow`), `UTC` for any zero offset."""
    key = getattr(zone, "key", None)
    if isinstance(key, str):
        return key
    return "UTC" if zone.utcoffset(None) == timedelta(0) else str(zone)


def _cron_field(values: tuple[int, ...] | frozenset[int], low: int, high: int) -> str:
    ordered = sorted(values)
    if ordered == list(range(low, high + 1)):
        return "*"
    runs: list[str] = []
    start = previous = ordered[0]
    for value in [*ordered[1:], None]:
        if value is not None and value == previous + 1:
            previous = value
            continue
        runs.append(str(start) if start == previous else f"{start}-{previous}")
        if value is not None:
            start = previous = value
    return ",".join(runs)
