"""Read back the canonical schedule text the store keeps (`entries.describe`) into a rule.

The store holds each entry's definition as text, such as `every 300s`,
`crontab 0 7 * * 1-5 in Europe/Berlin` or `once at 2026-03-02T06:00:00Z`, so that
`safebeat plan` can show the next windows an entry has *now*, before a deploy changes
it. Only text `describe` writes is read; anything else (an entry run by `safebeat exec`
or APScheduler, a zone this host lacks) gives None.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from safebeat.windows import (
    SOLAR_EVENTS,
    BoundedRule,
    ClockedRule,
    CrontabRule,
    IntervalRule,
    Rule,
    SolarRule,
)

_BOUNDS = re.compile(r"^(?P<rule>.*?)(?: not before (?P<start>\S+))?(?: not after (?P<end>\S+))?$")
_EVERY = re.compile(r"^every (?P<seconds>\S+)s(?: from (?P<anchor>\S+))?$")
_CRONTAB = re.compile(r"^crontab (?P<fields>(?:\S+ ){4,5}\S+) in (?P<zone>\S+)$")
_SOLAR = re.compile(r"^solar (?P<event>\w+) at (?P<lat>[^,\s]+),(?P<lon>\S+)$")
_ONCE = re.compile(r"^once at (?P<at>\S+)$")
#: (low, high) of each crontab field in described order: [second,] minute, hour,
#: day of month, month, day of week.
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))


def rule_from_text(text: str) -> Rule | None:
    """The rule whose `describe` text is `text`, or None if `text` is not such text."""
    try:
        return _read(text.strip())
    except (ValueError, InvalidOperation, ZoneInfoNotFoundError, OverflowError, OSError):
        return None


def _read(text: str) -> Rule | None:
    bounds = _BOUNDS.match(text)
    if bounds is None:  # pragma: no cover - the pattern matches any text
        return None
    inner = _plain(bounds["rule"])
    if bounds["start"] is None and bounds["end"] is None:
        return inner
    if inner is None or isinstance(inner, BoundedRule):
        return None
    start = None if bounds["start"] is None else _instant(bounds["start"])
    end = None if bounds["end"] is None else _instant(bounds["end"])
    return BoundedRule(inner, start, end)


def _plain(text: str) -> IntervalRule | CrontabRule | SolarRule | ClockedRule | None:
    if match := _EVERY.match(text):
        micros = Decimal(match["seconds"]) * 1_000_000
        every = timedelta(microseconds=int(micros))
        anchor = None if match["anchor"] is None else _instant(match["anchor"])
        return IntervalRule(every, anchor)
    if match := _CRONTAB.match(text):
        return _crontab(match["fields"].split(), match["zone"])
    if match := _SOLAR.match(text):
        if match["event"] not in SOLAR_EVENTS:
            return None
        return SolarRule(match["event"], float(match["lat"]), float(match["lon"]))
    if match := _ONCE.match(text):
        return ClockedRule(_instant(match["at"]))
    return None


def _crontab(fields: list[str], zone: str) -> CrontabRule:
    seconds: tuple[int, ...] = (0,)
    if len(fields) == len(_RANGES) + 1:
        seconds = tuple(sorted(_values(fields.pop(0), 0, 59)))
    minutes, hours, days, months, weekdays = (
        _values(field, low, high) for field, (low, high) in zip(fields, _RANGES, strict=True)
    )
    return CrontabRule(
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days_of_week=frozenset(weekdays),
        days_of_month=frozenset(days),
        months_of_year=frozenset(months),
        tz=timezone.utc if zone == "UTC" else ZoneInfo(zone),
        seconds=seconds,
    )


def _values(field: str, low: int, high: int) -> set[int]:
    """The numbers of one described field: `*`, or runs such as `1,5-9`."""
    if field == "*":
        return set(range(low, high + 1))
    found: set[int] = set()
    for run in field.split(","):
        first, _, last = run.partition("-")
        start, stop = int(first), int(last or first)
        if not low <= start <= stop <= high:
            raise ValueError(f"{run} is outside {low}-{high}")
        found.update(range(start, stop + 1))
    return found


def _instant(text: str) -> datetime:
    instant = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if instant.utcoffset() is None:
        raise ValueError(f"{text} has no offset")
    return instant.astimezone(timezone.utc)
