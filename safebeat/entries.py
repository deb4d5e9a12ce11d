"""Schedule entries: a `beat_schedule` item, validated and compiled into a window rule.

Celery's own schedule objects are the input (`schedule`, `crontab`, `solar`, or a number
of seconds / a timedelta); safebeat reads their parsed fields and never parses cron
text itself. A malformed entry raises `EntryError` naming it, and only that entry is
left out.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from decimal import Decimal
from typing import Any, TypeVar, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery import schedules

from safebeat.calendars import describe_calendar, parse_exclude
from safebeat.config import MAX_DURATION, Config, parse_duration, parse_misfire, parse_overlap
from safebeat.crontab import seconds_of
from safebeat.errors import ConfigError, EntryError, shown
from safebeat.identity import format_window
from safebeat.records import Definition, EntryState
from safebeat.windows import (
    SOLAR_EVENTS,
    BoundedRule,
    Calendar,
    ClockedRule,
    CrontabRule,
    IntervalRule,
    Jitter,
    Misfire,
    Overlap,
    Policy,
    Rule,
    SolarRule,
)

ENTRY_KEYS = frozenset({"task", "schedule", "args", "kwargs", "options", "relative"})
POLICY_KEYS = frozenset(
    {
        "misfire",
        "grace",
        "catchup_limit",
        "overlap",
        "timezone",
        "start",
        "end",
        "exclude",
        "jitter",
        "pause_after_failures",
    }
)
#: The longest jitter: a window's send time stays within an hour of the window.
MAX_JITTER = timedelta(hours=1)
#: Options safebeat sets itself on every message, so an entry may not set them.
RESERVED_OPTIONS = frozenset({"task_id"})
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MAX_SECONDS = MAX_DURATION.total_seconds()
_Shared = TypeVar("_Shared", bound=Rule | Policy)
#: One object per distinct rule and policy, shared by every entry that has it: a crontab's
#: sets of days and months alone cost about 2.5 KB per entry when each entry has its own.
_SHARED: weakref.WeakValueDictionary[object, Any] = weakref.WeakValueDictionary()


def _shared(value: _Shared) -> _Shared:
    """The object equal to `value` that other entries already hold, else `value` itself.

    The key is the fields, not the object: a key holding the object would keep it alive.
    """
    key = (type(value), *(getattr(value, f.name) for f in dataclasses.fields(value)))
    try:
        return cast(_Shared, _SHARED.setdefault(key, value))
    except TypeError:  # a field that cannot be hashed: the entry keeps its own
        return value


@dataclass(frozen=True, slots=True)
class Entry:
    """One compiled schedule entry: what to send, when, and under which policy."""

    name: str
    task: str
    rule: Rule
    policy: Policy
    schedule_text: str
    digest: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    overlap: Overlap = Overlap.ALLOW
    #: The earliest window this entry may dispatch (a django-celery-beat `start_time`).
    not_before: datetime | None = None
    #: Pause the entry after this many consecutive failed runs (the worker hook decides).
    pause_after_failures: int | None = None

    @property
    def definition(self) -> Definition:
        return Definition(self.name, self.schedule_text, self.digest)


def undecided_after(entry: Entry, state: EntryState) -> datetime:
    """The instant after which `entry`'s windows are still to be decided: the shared
    state's `decided_until`, but never before the entry's `not_before`.

    A one-off's single window counts even when it lies before the entry was registered
    (a django-celery-beat clocked task set for "now" is saved a moment before beat sees
    it): until it is decided, it is due, as stock beat runs it; its policy then dispatches
    it or records it as skipped.
    """
    after = state.decided_until
    rule = entry.rule.rule if isinstance(entry.rule, BoundedRule) else entry.rule
    if isinstance(rule, ClockedRule) and (state.last_window is None or state.last_window < rule.at):
        after = min(after, rule.at - timedelta(microseconds=1))
    if entry.not_before is not None:  # no window before the entry's start
        after = max(after, entry.not_before - timedelta(microseconds=1))
    return after


def compile_schedule(
    beat_schedule: Mapping[str, Any], *, app_timezone: tzinfo, config: Config
) -> tuple[dict[str, Entry], dict[str, EntryError]]:
    """Compile every entry; return (good entries, errors of the bad ones) by name."""
    entries: dict[str, Entry] = {}
    errors: dict[str, EntryError] = {}
    for name, raw in beat_schedule.items():
        try:
            entries[name] = compile_entry(name, raw, app_timezone=app_timezone, config=config)
        except EntryError as exc:
            errors[name] = exc
        except Exception as exc:  # noqa: BLE001 - one entry's surprise must not stop the rest
            detail = " ".join(str(exc).split())
            errors[name] = EntryError(
                _entry_name(name),
                f"cannot be compiled ({type(exc).__name__}: {detail}); fix or remove the entry",
            )
    return entries, errors


def compile_entry(name: str, raw: object, *, app_timezone: tzinfo, config: Config) -> Entry:
    """Validate one `beat_schedule` item and compile its rule; raise EntryError on bad input."""
    if not isinstance(name, str) or not name:
        raise EntryError(_entry_name(name), "an entry name must be a non-empty string")
    if not isinstance(raw, Mapping):
        raise EntryError(name, f"expected a dict with 'task' and 'schedule', got {shown(raw)}")
    unknown = set(raw) - ENTRY_KEYS
    if unknown:
        raise EntryError(
            name, f"unknown key(s) {_sorted(unknown)}; an entry has {sorted(ENTRY_KEYS)}"
        )
    task = raw.get("task")
    if not isinstance(task, str) or not task:
        raise EntryError(name, f"'task' must be a task name, got {shown(task)}")
    args = raw.get("args") or ()
    if not isinstance(args, list | tuple):
        raise EntryError(name, f"'args' must be a list or tuple, got {type(args).__name__}")
    kwargs = raw.get("kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise EntryError(name, f"'kwargs' must be a dict, got {type(kwargs).__name__}")
    options = _options(name, raw.get("options"))
    safebeat_options = options.pop("safebeat", None) or {}
    reserved = RESERVED_OPTIONS & set(options)
    if reserved:
        raise EntryError(name, f"options {sorted(reserved)} are set by safebeat per window")
    if "schedule" not in raw:
        raise EntryError(name, "'schedule' is missing")
    policy, zone = _policy(name, safebeat_options, config, app_timezone)
    overlap = _overlap(name, safebeat_options, config)
    pause_after = _pause_after_failures(name, safebeat_options, config)
    rule = _bounded(
        name,
        _rule(name, raw["schedule"], relative=_relative(name, raw.get("relative")), zone=zone),
        safebeat_options,
    )
    calendar = _calendar(name, safebeat_options, zone)
    jitter = _jitter(name, safebeat_options, f"{config.namespace}/{name}")
    policy = dataclasses.replace(policy, calendar=calendar, jitter=jitter)
    schedule_text = sys.intern(describe(rule))  # one string per distinct schedule
    described: dict[str, object] = {
        "task": task,
        "schedule": schedule_text,
        "args": args,
        "kwargs": kwargs,
        "options": options,
        "policy": [policy.misfire.value, str(policy.grace), policy.catchup_limit],
    }
    described.update(_set_parts(overlap, calendar, jitter, pause_after))
    try:
        digest = _digest(described)
    except (ValueError, RecursionError) as exc:  # a 5000-digit int, a list holding itself
        raise EntryError(
            name, f"args, kwargs and options must be plain data Celery can send ({exc})"
        ) from None
    return Entry(
        name,
        task,
        _shared(rule),
        _shared(policy),
        schedule_text,
        digest,
        tuple(args),
        kwargs,
        options,
        overlap,
        pause_after_failures=pause_after,
    )


def _set_parts(
    overlap: Overlap, calendar: Calendar | None, jitter: Jitter | None, pause_after: int | None
) -> dict[str, object]:
    """The digest's parts for policies an entry sets: each only when set, so that the
    digests of existing entries stay what they were."""
    parts: dict[str, object] = {}
    if overlap is not Overlap.ALLOW:
        parts["overlap"] = overlap.value
    if calendar is not None:
        parts["exclude"] = describe_calendar(calendar)
    if jitter is not None:
        parts["jitter"] = _seconds_text(jitter.spread)
    if pause_after is not None:
        parts["pause_after_failures"] = pause_after
    return parts


def _entry_name(name: object) -> str:
    """The name an error about entry `name` shows (it may not be a string at all)."""
    return name if isinstance(name, str) else shown(name)


def _sorted(keys: Iterable[object]) -> list[object]:
    """`keys` in order for a message, also when they are of types that do not compare."""
    return sorted(keys, key=lambda key: (type(key).__name__, shown(key)))


def _options(name: str, value: object) -> dict[str, Any]:
    """The entry's `options`: a dict of `apply_async` keyword arguments (a copy)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise EntryError(
            name, f"'options' must be a dict of apply_async options, got {type(value).__name__}"
        )
    odd = [key for key in value if not isinstance(key, str)]
    if odd:
        raise EntryError(
            name, f"'options' keys are apply_async keyword names, so text; got {_sorted(odd)}"
        )
    return dict(value)


def _relative(name: str, value: object) -> bool:
    """The entry's `relative` flag: True or False (None: not set)."""
    if value is None or isinstance(value, bool):
        return bool(value)
    raise EntryError(name, f"'relative' must be True or False, got {shown(value)}")


def _policy(
    name: str, options: object, config: Config, app_timezone: tzinfo
) -> tuple[Policy, tzinfo]:
    if not isinstance(options, Mapping):
        raise EntryError(name, f"options['safebeat'] must be a dict, got {shown(options)}")
    unknown = set(options) - POLICY_KEYS
    if unknown:
        raise EntryError(
            name,
            f"unknown options['safebeat'] key(s) {_sorted(unknown)}; known: {sorted(POLICY_KEYS)}",
        )
    try:
        misfire = parse_misfire(options["misfire"], "misfire") if "misfire" in options else None
        grace = (
            parse_duration(options["grace"], "grace") if options.get("grace") is not None else None
        )
        limit = options.get("catchup_limit", config.catchup_limit)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ConfigError(
                f"catchup_limit={shown(limit)}: expected a whole number of at least 1"
            )
    except ConfigError as exc:
        raise EntryError(name, f"options['safebeat']: {exc}") from None
    zone = _zone(name, options["timezone"]) if "timezone" in options else app_timezone
    policy = Policy(
        misfire=misfire if misfire is not None else config.misfire,
        grace=grace if "grace" in options else config.grace,
        catchup_limit=limit,
    )
    return policy, zone


def _overlap(name: str, options: Mapping[str, Any], config: Config) -> Overlap:
    if "overlap" not in options:
        return config.overlap
    try:
        return parse_overlap(options["overlap"], "overlap")
    except ConfigError as exc:
        raise EntryError(name, f"options['safebeat']: {exc}") from None


def _pause_after_failures(name: str, options: Mapping[str, Any], config: Config) -> int | None:
    """The entry's `pause_after_failures` (None or "off": never), else the setting's."""
    if "pause_after_failures" not in options:
        return config.pause_after_failures
    value = options["pause_after_failures"]
    if value is None or value == "off":
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise EntryError(
            name,
            f"options['safebeat']: pause_after_failures={shown(value)}: expected a whole "
            'number of at least 1, or None / "off"',
        )
    return value


def _bounded(name: str, rule: Rule, options: Mapping[str, Any]) -> Rule:
    """`rule` limited to the entry's `start` and `end`, if it sets them.

    An interval with a `start` (and no anchor of its own) counts its windows from it.
    """
    start = _instant(name, options, "start")
    end = _instant(name, options, "end")
    if start is None and end is None:
        return rule
    if start is not None and end is not None and end < start:
        raise EntryError(
            name,
            f"options['safebeat']: end {format_window(end)} is before start "
            f"{format_window(start)}; swap them",
        )
    if isinstance(rule, IntervalRule) and rule.anchor is None and start is not None:
        rule = IntervalRule(rule.every, anchor=start)
    assert not isinstance(rule, BoundedRule)  # noqa: S101 - _rule never bounds a rule
    return BoundedRule(rule, start, end)


def _instant(name: str, options: Mapping[str, Any], key: str) -> datetime | None:
    """The entry's `start` or `end`: an aware datetime or ISO 8601 text with an offset."""
    value = options.get(key)
    if value is None:
        return None
    instant = value
    if isinstance(value, str):
        try:
            instant = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            instant = None
    if not isinstance(instant, datetime) or instant.utcoffset() is None:
        raise EntryError(
            name,
            f"options['safebeat']['{key}']={shown(value)}: expected an ISO 8601 time with "
            "its UTC offset, like '2026-03-01T09:00:00+01:00' (or an aware datetime)",
        )
    try:
        return instant.astimezone(timezone.utc)
    except OverflowError:
        raise EntryError(
            name, f"options['safebeat']['{key}']={shown(value)} is out of range"
        ) from None


def _calendar(name: str, options: Mapping[str, Any], zone: tzinfo) -> Calendar | None:
    if options.get("exclude") is None:
        return None
    try:
        return parse_exclude(options["exclude"], zone)
    except ConfigError as exc:
        raise EntryError(name, f"options['safebeat']['exclude']: {exc}") from None


def _jitter(name: str, options: Mapping[str, Any], key: str) -> Jitter | None:
    if options.get("jitter") is None:
        return None
    try:
        spread = parse_duration(options["jitter"], "jitter")
    except ConfigError as exc:
        raise EntryError(name, f"options['safebeat']: {exc}") from None
    if spread > MAX_JITTER:
        raise EntryError(
            name,
            f"options['safebeat']: jitter={shown(options['jitter'])}: at most 1h; a window "
            "is sent within the jitter after it",
        )
    return Jitter(spread, key) if spread > timedelta(0) else None


def _zone(name: str, value: object) -> tzinfo:
    if isinstance(value, tzinfo):
        return value
    if not isinstance(value, str):
        raise EntryError(
            name, f"time zone {shown(value)}: expected an IANA name like 'Europe/Moscow'"
        )
    try:
        return ZoneInfo(value)
    # Not found, a bad name ("../x"), a folder of the database ("Europe": IsADirectoryError),
    # a name too long for the file system (OSError): whatever the reason, the name is wrong.
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise EntryError(
            name, f"unknown time zone {value!r}; use an IANA name like 'Europe/Moscow'"
        ) from None


def _rule(name: str, value: object, *, relative: bool, zone: tzinfo) -> Rule:
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
            return ClockedRule(clocked_time.astimezone(timezone.utc))
        except OverflowError:  # within hours of datetime.min or max: no UTC instant
            raise EntryError(
                name, f"clocked time {clocked_time} is out of range; use a year from 2 to 9998"
            ) from None
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


def describe(rule: Rule) -> str:
    """Return a canonical text of a rule: equal text, equal windows."""
    if isinstance(rule, BoundedRule):
        text = describe(rule.rule)
        if rule.start is not None:
            text += f" not before {format_window(rule.start)}"
        if rule.end is not None:
            text += f" not after {format_window(rule.end)}"
        return text
    if isinstance(rule, IntervalRule):
        every = f"every {_seconds_text(rule.every)}s"
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


def _seconds_text(duration: timedelta) -> str:
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


def _digest(payload: Mapping[str, object]) -> str:
    """A digest of everything an entry sends and when, stable across processes."""
    try:
        text = json.dumps(payload, sort_keys=True, default=_stable_text)
    except TypeError:
        # Keys JSON cannot sort ({1: "a", "b": 2}) or hold (a tuple). Only then this other
        # form, so that the digest of every entry that had one stays what it was.
        text = json.dumps(_typed_keys(payload), sort_keys=True, default=_stable_text)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _typed_keys(value: object) -> object:
    """`value` with every dict key turned into text that keeps its type: 1 -> "int:1"."""
    if isinstance(value, Mapping):
        return {
            f"{type(key).__name__}:{_key_text(key)}": _typed_keys(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_typed_keys(item) for item in value]
    return value


def _key_text(key: object) -> str:
    if key is None or isinstance(key, str | int | float):  # bool is an int
        return shown(key)
    return _stable_text(key)


def _stable_text(value: object) -> str:
    """Text for values JSON cannot hold; never a repr with a memory address in it."""
    if isinstance(value, datetime | timedelta | Misfire):
        return str(value)
    return f"<{type(value).__module__}.{type(value).__qualname__}>"
