"""Exclusion calendars: `options["safebeat"]["exclude"]` read into a `windows.Calendar`.

The value is either a list of days and day ranges, or the path of an iCalendar file
shipped with the code (a `str` or `pathlib.Path` ending in `.ics`):

- a day: `datetime.date(2026, 12, 25)` or `"2026-12-25"`;
- the same day every year: `"--12-25"` (ISO 8601's form without a year);
- a range, both days included: `"2026-12-24/2026-12-26"` or a pair of days;
- an `.ics` file: its all-day events (`DTSTART;VALUE=DATE`, `DTEND` exclusive, or
  `DURATION:PnD`), once or `RRULE:FREQ=YEARLY` (with `INTERVAL`, `COUNT`, `UNTIL`).

The file is read with the standard library only, once, when the entry is compiled; its
days go into the entry's digest, so editing the file is a changed definition. Days are
days of the entry's time zone. A malformed value raises `ConfigError` saying which part.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from datetime import date, datetime, timedelta, tzinfo
from pathlib import Path

from safebeat.errors import SHOWN_CHARS, ConfigError, shorten, shown
from safebeat.limits import MAX_DURATION
from safebeat.windows import Calendar, YearlyDays

_YEARLY = re.compile(r"^--(\d{2})-(\d{2})$")
_ICS_DATE = re.compile(r"^(\d{4})(\d{2})(\d{2})$")
_DAYS = re.compile(r"^P([0-9]+)D$")
#: Most digits a number of an .ics file may have (a count or interval of years, a
#: duration in days): more is no calendar, and past 4,300 `int` refuses to read it.
_MAX_DIGITS = 9
#: Longest span one yearly event may cover (a yearly span longer than a year is not one).
_MAX_YEARLY_DAYS = 366


def parse_exclude(value: object, tz: tzinfo) -> Calendar:
    """Read an `exclude` value (see the module's docstring) into a calendar in `tz`."""
    if isinstance(value, str | os.PathLike) and str(value).lower().endswith(".ics"):
        return read_ics(Path(value), tz)
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ConfigError(
            f"exclude={shown(value)}: expected a list of days ('2026-12-25', '--12-25' every "
            "year, '2026-12-24/2026-12-26') or the path of an .ics file"
        )
    ranges: list[tuple[date, date]] = []
    yearly: list[YearlyDays] = []
    for item in value:
        if isinstance(item, str) and (match := _YEARLY.match(item.strip())):
            month, day = int(match.group(1)), int(match.group(2))
            _check_day(month, day, item)
            yearly.append(YearlyDays(month, day))
            continue
        ranges.append(_range(item))
    return Calendar(tz, tuple(sorted(ranges)), tuple(yearly))


def describe_calendar(calendar: Calendar) -> list[str]:
    """A canonical text of the excluded days, for an entry's digest."""
    ranges = [f"{first.isoformat()}/{last.isoformat()}" for first, last in calendar.ranges]
    yearly = [
        f"--{y.month:02d}-{y.day:02d}+{y.length}d/{y.first_year}-{y.last_year or ''}/{y.interval}"
        for y in calendar.yearly
    ]
    return [*ranges, *yearly]


def _range(item: object) -> tuple[date, date]:
    if isinstance(item, str) and "/" in item:
        first_text, _, last_text = item.partition("/")
        first, last = _day(first_text), _day(last_text)
    elif isinstance(item, list | tuple) and len(item) == 2:
        first, last = _day(item[0]), _day(item[1])
    else:
        first = last = _day(item)
    if last < first:
        raise ConfigError(f"exclude: range {shown(item)} ends before it starts")
    return first, last


def _day(value: object) -> date:
    if isinstance(value, datetime):
        raise ConfigError(f"exclude: {shown(value)} is a time; give a day like '2026-12-25'")
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value.strip())
        except ValueError:
            pass
    raise ConfigError(
        f"exclude: {shown(value)} is not a day; write '2026-12-25', '--12-25' (every year) "
        "or a range '2026-12-24/2026-12-26'"
    )


def _check_day(month: int, day: int, shown_as: object) -> None:
    try:
        date(2000, month, day)  # a leap year: 29 February is a day
    except ValueError:
        raise ConfigError(f"exclude: {shown(shown_as)} is not a day of the year") from None


# --- iCalendar ------------------------------------------------------------------------------


def read_ics(path: Path, tz: tzinfo) -> Calendar:
    """Read the all-day events of the iCalendar file `path` (see the module's docstring)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"exclude: cannot read the calendar {str(path)!r} ({exc}); give a path that "
            "exists where beat runs, e.g. Path(__file__).parent / 'holidays.ics'"
        ) from None
    ranges: list[tuple[date, date]] = []
    yearly: list[YearlyDays] = []
    for number, event in enumerate(_events(_unfolded(text)), start=1):
        summary = event.get("SUMMARY", ("", "no summary"))[1]
        where = f"{path.name}: event {number} ({summary[:SHOWN_CHARS]})"
        if event.get("STATUS", ("", ""))[1].upper() == "CANCELLED":
            continue
        first, length = _event_days(event, where)
        rule = event.get("RRULE")
        if rule is None:
            try:
                ranges.append((first, first + timedelta(days=length - 1)))
            except OverflowError:
                raise ConfigError(f"exclude: {where} ends after the year 9999") from None
        else:
            yearly.append(_yearly(rule[1], first, length, where))
    return Calendar(tz, tuple(sorted(ranges)), tuple(yearly))


def _unfolded(text: str) -> list[str]:
    """The content lines of an iCalendar text, folded lines joined (RFC 5545, 3.1).

    Each line's parts are joined once, at the end: adding each fold to the line so far
    copies the line again per fold, which took 18 s for a 3.6 MB line."""
    lines: list[list[str]] = []
    for raw in text.splitlines():
        if raw[:1] in {" ", "\t"} and lines:
            lines[-1].append(raw[1:])
        elif raw.strip():
            lines.append([raw])
    return ["".join(parts) for parts in lines]


def _events(lines: list[str]) -> Iterable[dict[str, tuple[str, str]]]:
    """Each VEVENT as {property name: (parameters, value)}."""
    event: dict[str, tuple[str, str]] | None = None
    for line in lines:
        head, _, value = line.partition(":")
        name, _, params = head.partition(";")
        name = name.upper()
        if name == "BEGIN" and value.upper() == "VEVENT":
            event = {}
        elif name == "END" and value.upper() == "VEVENT" and event is not None:
            yield event
            event = None
        elif event is not None and name not in event:
            event[name] = (params.upper(), value.strip())


def _event_days(event: Mapping[str, tuple[str, str]], where: str) -> tuple[date, int]:
    """An all-day event's first day and number of days."""
    if "DTSTART" not in event:
        raise ConfigError(f"exclude: {where} has no DTSTART")
    first = _ics_date(event["DTSTART"][1], where, "DTSTART")
    if "DTEND" in event:
        length = (_ics_date(event["DTEND"][1], where, "DTEND") - first).days
    elif "DURATION" in event:
        match = _DAYS.match(event["DURATION"][1].upper())
        if match is None:
            raise ConfigError(
                f"exclude: {where}: DURATION {event['DURATION'][1]!r} is not whole days (P1D)"
            )
        digits = match.group(1).lstrip("0") or "0"
        length = int(digits) if len(digits) <= _MAX_DIGITS else MAX_DURATION.days + 1
        if length > MAX_DURATION.days:
            raise ConfigError(
                f"exclude: {where}: DURATION {shorten(event['DURATION'][1])} is longer than "
                f"{MAX_DURATION.days} days"
            )
    else:
        length = 1  # an all-day event without an end lasts its day (RFC 5545, 3.6.1)
    if length < 1:
        raise ConfigError(f"exclude: {where} ends before it starts")
    return first, length


def _ics_date(value: str, where: str, name: str) -> date:
    match = _ICS_DATE.match(value)
    if match is None:
        raise ConfigError(
            f"exclude: {where}: {name} {value!r} is not an all-day date (YYYYMMDD); "
            "only all-day events exclude days"
        )
    try:
        return date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        raise ConfigError(f"exclude: {where}: {name} {value!r} is not a day") from None


def _yearly(rule: str, first: date, length: int, where: str) -> YearlyDays:
    """Read an RRULE that repeats an all-day event on its own date every N years."""
    parts = dict(part.partition("=")[::2] for part in rule.upper().split(";") if part)
    if parts.get("FREQ") != "YEARLY":
        raise ConfigError(
            f"exclude: {where}: RRULE {rule!r} is not supported; only FREQ=YEARLY repeats "
            "an event (list other days one by one)"
        )
    if length > _MAX_YEARLY_DAYS:
        raise ConfigError(f"exclude: {where} lasts {length} days, more than a year")
    same_day = {"BYMONTH": str(first.month), "BYMONTHDAY": str(first.day)}
    for key in set(parts) - {"FREQ", "INTERVAL", "COUNT", "UNTIL", "WKST"}:
        if same_day.get(key) != parts[key].lstrip("0"):
            raise ConfigError(
                f"exclude: {where}: RRULE {key}={parts[key]} is not supported (a yearly "
                "holiday on another weekday or date each year: list its days one by one)"
            )
    interval = _count(parts.get("INTERVAL", "1"), where, "INTERVAL")
    last_year: int | None = None
    if "COUNT" in parts:
        last_year = first.year + (_count(parts["COUNT"], where, "COUNT") - 1) * interval
    if "UNTIL" in parts:
        until = _ics_date(parts["UNTIL"][:8], where, "UNTIL")
        last_year = (
            until.year if (until.month, until.day) >= (first.month, first.day) else (until.year - 1)
        )
    return YearlyDays(first.month, first.day, length, first.year, last_year, interval)


def _count(text: str, where: str, name: str) -> int:
    digits = text.lstrip("0")
    if not (text.isascii() and text.isdigit()) or not digits or len(digits) > _MAX_DIGITS:
        raise ConfigError(
            f"exclude: {where}: RRULE {name}={shorten(text)} is not a whole number from 1 to "
            f"{10**_MAX_DIGITS - 1:,}"
        )
    return int(digits)
