"""Entries added at run time, as the store keeps them: one JSON definition per entry.

`encode` turns what `safebeat.schedules.add` was given into the stored text, refusing
anything that could not be stored and read back; `decode` turns stored text back into a
`beat_schedule` item, which beat compiles like any other. The schedule is kept as data,
never pickled:

    {"every": 30.0}                                a number of seconds
    {"crontab": "0 9 * * 1-5"}                     5 cron fields, or 6 with seconds first
    {"at": "2026-12-24T18:00:00+00:00"}            one window at that instant

The entry's time zone (for a crontab) is its `options["safebeat"]["timezone"]`, as for
any entry. Nothing here does I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import Any

from celery import schedules

from safebeat.config import Config, parse_duration
from safebeat.crontab import crontab
from safebeat.entries import Entry, compile_entry
from safebeat.entries.app_entries import Schedule
from safebeat.entries.compiling import within_limits
from safebeat.entries.custom import class_name, stock_class
from safebeat.errors import ConfigError, EntryError, shown
from safebeat.limits import (
    MAX_DURATION,
    LimitError,
    check_depth,
    check_instant,
)

#: The keys of a stored definition.
SPEC_KEYS = frozenset({"task", "schedule", "args", "kwargs", "options"})
_CRON_FIELD = re.compile(r"^[0-9*/,\-a-zA-Z]+$")


@dataclass(frozen=True)
class OneOff:
    """A schedule with one window at `clocked_time` (read as django-celery-beat's clocked)."""

    clocked_time: datetime


#: What `safebeat.schedules.add` accepts as a schedule.
ScheduleInput = float | int | timedelta | datetime | str | schedules.crontab


def schedule_spec(name: str, schedule: object) -> dict[str, Any]:
    """The stored form of `schedule`: every / crontab / at (see the module docstring).

    Accepts seconds (a number, a timedelta, or text such as "30s", "5m"), a crontab
    (Celery's, safebeat's with seconds, or 5 or 6 cron fields as text) and an aware
    datetime (one window). Raise EntryError naming `name` for anything else.
    """
    if stock_class(schedule) is not None:  # its own is_due would be lost in the stored text
        raise EntryError(
            name,
            f"{class_name(schedule)} decides its own windows, and a stored entry keeps only "
            "a crontab's fields or an interval; put it in the app's beat_schedule "
            "(docs/windows.md, custom schedule classes)",
        )
    if isinstance(schedule, schedules.crontab):
        return {"crontab": cron_text(schedule)}
    if isinstance(schedule, datetime):
        if schedule.utcoffset() is None:
            raise EntryError(
                name, f"one-off time {schedule.isoformat()} has no time zone; give an aware one"
            )
        try:
            return {"at": check_instant(schedule, "one-off time").isoformat()}
        except LimitError as exc:
            raise EntryError(name, str(exc)) from None
    if isinstance(schedule, str) and len(schedule.split()) in {5, 6}:
        return {"crontab": _checked_cron(name, schedule)}
    if isinstance(schedule, bool) or not isinstance(schedule, int | float | timedelta | str):
        raise EntryError(
            name,
            f"schedule {shown(schedule)}: expected seconds, a crontab (or its 5 or 6 "
            "fields as text) or an aware datetime",
        )
    try:
        every = parse_duration(schedule, "schedule")
    except ConfigError as exc:
        raise EntryError(name, f"{exc}, or 5 or 6 cron fields") from None
    if every <= timedelta(0):
        raise EntryError(name, f"an interval must be positive, got {shown(schedule)}")
    return {"every": every.total_seconds()}


def cron_text(schedule: schedules.crontab) -> str:
    """A crontab's fields as text: `m h dom mon dow`, with seconds first if it has them."""
    fields = [
        schedule._orig_minute,
        schedule._orig_hour,
        schedule._orig_day_of_month,
        schedule._orig_month_of_year,
        schedule._orig_day_of_week,
    ]
    second = getattr(schedule, "_orig_second", None)
    if second is not None and str(schedules.cronfield(second)) != "0":
        fields.insert(0, second)
    return " ".join(str(schedules.cronfield(value) or "*").replace(" ", "") for value in fields)


def _checked_cron(name: str, text: str) -> str:
    fields = text.split()
    if not all(_CRON_FIELD.match(f) for f in fields):
        raise EntryError(name, f"crontab {text!r}: a field has characters cron does not use")
    to_crontab(name, " ".join(fields))  # raises EntryError if Celery cannot read it
    return " ".join(fields)


def to_crontab(name: str, text: str) -> crontab:
    """The crontab of 5 fields (`m h dom mon dow`) or 6 (seconds first)."""
    fields = text.split()
    if len(fields) == 5:
        fields.insert(0, "0")
    if len(fields) != 6:
        raise EntryError(name, f"crontab {text!r}: expected 5 fields, or 6 with seconds first")
    second, minute, hour, day_of_month, month_of_year, day_of_week = fields
    try:
        return crontab(
            second=second,
            minute=minute,
            hour=hour,
            day_of_week=day_of_week,
            day_of_month=day_of_month,
            month_of_year=month_of_year,
        )
    except (ValueError, TypeError) as exc:
        raise EntryError(name, f"crontab {text!r}: {exc}") from None


def encode(
    name: str,
    task: str,
    schedule: object,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
) -> str:
    """The stored text of one entry; raise EntryError naming `name` for what cannot be stored."""
    if not isinstance(task, str) or not task:
        raise EntryError(name, f"'task' must be a task name, got {shown(task)}")
    within_limits(name, task)
    try:
        for what, data in (("args", args), ("kwargs", kwargs), ("options", options)):
            check_depth(data, f"'{what}'")
    except LimitError as exc:
        raise EntryError(name, str(exc)) from None
    spec = {
        "task": task,
        "schedule": schedule_spec(name, schedule),
        "args": list(args),
        "kwargs": dict(kwargs or {}),
        "options": dict(options or {}),
    }
    try:
        text = json.dumps(spec, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise EntryError(
            name, f"args, kwargs and options of a stored entry must be JSON data ({exc})"
        ) from None
    if json.loads(text) != spec:  # a tuple became a list, a key 1 became "1": refuse
        raise EntryError(
            name, "args, kwargs and options must read back unchanged from JSON (string keys)"
        )
    return text


def decode(name: str, text: str) -> dict[str, Any]:
    """The `beat_schedule` item of a stored definition; raise EntryError if it is malformed."""
    try:
        spec = json.loads(text)
    except ValueError as exc:
        raise EntryError(name, f"the stored definition is not JSON ({exc})") from None
    if not isinstance(spec, dict) or not set(spec) <= SPEC_KEYS or "schedule" not in spec:
        raise EntryError(name, f"the stored definition {text[:200]!r} is not an entry")
    return {**spec, "schedule": _schedule(name, spec["schedule"])}


def _schedule(name: str, spec: object) -> object:
    if isinstance(spec, dict) and len(spec) == 1:
        [(kind, value)] = spec.items()
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if kind == "every" and number and 0 < value <= MAX_DURATION.total_seconds():
            return timedelta(seconds=value)
        if kind == "crontab" and isinstance(value, str):
            return to_crontab(name, value)
        if kind == "at" and isinstance(value, str):
            try:
                at = datetime.fromisoformat(value)
            except ValueError:
                pass
            else:
                if at.tzinfo is not None:
                    return OneOff(at)
    raise EntryError(name, f"the stored schedule {shown(spec)} is not every / crontab / at")


def describe_spec(text: str) -> str:
    """A short text of a stored schedule (with the crontab's zone), for `schedule list`."""
    try:
        spec = json.loads(text)
        [(kind, value)] = spec["schedule"].items()
        zone = (spec.get("options") or {}).get("safebeat", {}).get("timezone")
    except (ValueError, KeyError, TypeError, AttributeError):
        return "(unreadable)"
    if kind == "every":
        return f"every {value:g}s"
    if kind == "crontab" and zone:
        return f"crontab {value} in {zone}"
    return f"{kind} {value}"


@dataclass(frozen=True)
class Compiled:
    """Stored entries compiled: the good ones, the broken ones, and the names refused because
    the code's schedule already has them (the code's entry runs)."""

    entries: dict[str, Entry]
    broken: dict[str, EntryError]
    clashes: frozenset[str]


def compile_runtime(
    specs: Mapping[str, str], *, taken: Collection[str], app_timezone: tzinfo, config: Config
) -> Compiled:
    """Compile stored definitions as beat does; names in `taken` are left out as clashes."""
    entries: dict[str, Entry] = {}
    broken: dict[str, EntryError] = {}
    for name, text in specs.items():
        if name in taken:
            continue
        try:
            entries[name] = compile_entry(
                name, decode(name, text), app_timezone=app_timezone, config=config
            )
        except EntryError as exc:
            broken[name] = exc
    return Compiled(entries, broken, frozenset(name for name in specs if name in taken))


def with_runtime_entries(
    schedule: Schedule, specs: Mapping[str, str], *, app_timezone: tzinfo, config: Config
) -> Schedule:
    """`schedule` (the code's) with the stored entries beat runs beside it, as beat compiles
    them: a stored entry whose name the code uses is left out, the code's runs."""
    runtime = compile_runtime(
        specs,
        taken=schedule.entries.keys() | schedule.broken.keys(),
        app_timezone=app_timezone,
        config=config,
    )
    return Schedule({**schedule.entries, **runtime.entries}, {**schedule.broken, **runtime.broken})
