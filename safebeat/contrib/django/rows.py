"""django-celery-beat `PeriodicTask` rows -> safebeat entries, or an error naming the row.

A row is read as plain values (`ROW_FIELDS`), never as a model instance, so a bad value
in one row (invalid JSON, an unknown time zone) is that row's error and not the query's.
It becomes a `beat_schedule`-style item compiled by `safebeat.entries.compile_entry`, so
rows and settings entries get the same rules and checks; then the row's own fields are
applied: `start_time` (the earliest window, and the origin of interval windows), the
last edit (no catch-up of windows missed before it, e.g. while disabled), `expires` /
`expire_seconds`, queue, exchange, routing key, priority and headers. safebeat's own
per-entry policy sits in the row's headers, under `"safebeat"`, exactly as in
`options["safebeat"]` of a `beat_schedule` entry: `{"safebeat": {"misfire": "skip"}}`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, tzinfo
from decimal import Decimal
from operator import attrgetter, itemgetter
from typing import Any

from celery import schedules

from safebeat.config import Config
from safebeat.contrib.django.row_shapes import (
    SCHEDULE_FIELDS,
    Shape,
    entry_of_shape,
    shape_digest,
    shape_key,
    shape_of,
)
from safebeat.entries import Entry, describe
from safebeat.entries.compiling import Timings, described_entry
from safebeat.entries.options import unknown_keys
from safebeat.errors import EntryError
from safebeat.limits import LimitError, check_instant
from safebeat.windows import ClockedRule, CrontabRule, IntervalRule, Rule, next_window

#: A JSON string, as `json.dumps` writes it.
_quoted = json.encoder.encode_basestring_ascii
#: The values of a row that decide its entry (`crontab_tz` is the raw time zone text).
ROW_FIELDS = (
    "id",
    "name",
    "task",
    "enabled",
    "one_off",
    "total_run_count",
    "start_time",
    "expires",
    "expire_seconds",
    "date_changed",
    "args",
    "kwargs",
    "queue",
    "exchange",
    "routing_key",
    "priority",
    "headers",
    *SCHEDULE_FIELDS,
)
#: The values of a row that decide its schedule (`_schedule`), as one tuple.
_schedule_key = itemgetter(*SCHEDULE_FIELDS)
#: An entry's fields in order, and where `_with_row_fields` sets its own.
_ENTRY_FIELDS = tuple(field.name for field in dataclasses.fields(Entry))
_entry_fields = attrgetter(*_ENTRY_FIELDS)
_RULE, _TEXT, _DIGEST, _NOT_BEFORE = map(
    _ENTRY_FIELDS.index, ("rule", "schedule_text", "digest", "not_before")
)
#: JSON texts most rows hold, read without the parser (a new object each time).
_EMPTY = {"{}": dict, "[]": list}
_PERIODS = ("days", "hours", "minutes", "seconds", "microseconds")
_ROW_POLICY_KEYS = frozenset({"misfire", "grace", "catchup_limit", "overlap"})


class RowCache:
    """What one read of many rows works out once and its rows share: each distinct
    schedule's Celery object, each timing (`safebeat.entries.compile_entry`'s), and
    whether each crontab rule still matches. Rows of one schedule then compile their
    own fields only. For one read: `now` is the read's."""

    __slots__ = ("app", "matches", "schedules", "shapes", "timings")

    def __init__(self) -> None:
        self.schedules: dict[tuple[Any, ...], tuple[object, str | None]] = {}
        self.timings: Timings = {}
        self.matches: dict[int, tuple[CrontabRule, bool]] = {}
        self.app: tuple[Any, tzinfo] | None = None  # the app's tasks and time zone
        #: Each shape of row (`safebeat.contrib.django.row_shapes`) by its values; None
        #: for a shape whose rows are each compiled in full.
        self.shapes: dict[tuple[Any, ...], Shape | None] = {}


def _app_parts(app: Any, cache: RowCache | None) -> tuple[Any, tzinfo]:
    """The app's task registry and time zone (two properties, read once per read)."""
    if cache is None:
        return app.tasks, app.timezone
    if cache.app is None:
        cache.app = (app.tasks, app.timezone)
    return cache.app


def compile_row(
    row: Mapping[str, Any],
    *,
    app: Any,
    config: Config,
    now: datetime,
    row_time_zones: bool = True,
    cache: RowCache | None = None,
) -> Entry:
    """Compile one enabled row into an entry; raise EntryError naming the row.

    `now` is when the row is read (to tell a crontab that can never match).
    `row_time_zones` False ignores crontab time zones, as django-celery-beat does with
    `DJANGO_CELERY_BEAT_TZ_AWARE = False`. `cache`: shared by the rows of one read.
    """
    name = str(row["name"])
    key = (shape_key(row), row_time_zones)
    shape = None if cache is None else cache.shapes.get(key)
    if shape is not None:  # a row of a shape compiled before: its own parts only
        args = _json(name, "args", row["args"] or "[]", list)
        kwargs = _json(name, "kwargs", row["kwargs"] or "{}", dict)
        digest = shape_digest(shape, name, args, kwargs)
        rule, text, not_before = _row_timing(shape.entry, name, row, now, cache)
        return entry_of_shape(
            shape,
            name,
            args,
            kwargs,
            rule=rule,
            schedule_text=text,
            digest=row_digest(digest, text, not_before, bool(row["one_off"])),
            not_before=not_before,
        )
    entry, described = _compiled(
        name, row, app=app, config=config, zones=row_time_zones, cache=cache
    )
    if cache is not None and key not in cache.shapes:
        cache.shapes[key] = shape_of(entry, described())
    return _with_row_fields(entry, row, now, cache)


def _compiled(
    name: str,
    row: Mapping[str, Any],
    *,
    app: Any,
    config: Config,
    zones: bool,
    cache: RowCache | None,
) -> tuple[Entry, Callable[[], dict[str, object]]]:
    """Compile the row's item in full: its entry, and how to make its digest's payload."""
    task = row["task"]
    tasks, app_timezone = _app_parts(app, cache)
    if task not in tasks:
        raise EntryError(
            name,
            f"unknown task {task!r}: beat does not know it (a typo, or its module is not "
            "imported by the Celery app)",
        )
    headers = _json(name, "headers", row["headers"] or "{}", dict)
    policy = headers.pop("safebeat", None) or {}
    if not isinstance(policy, dict):
        raise EntryError(name, f"headers['safebeat'] must be an object, got {policy!r}")
    unknown = set(policy) - _ROW_POLICY_KEYS
    if unknown:
        raise unknown_keys(
            name,
            "headers['safebeat']",
            unknown,
            _ROW_POLICY_KEYS,
            " (a crontab's time zone is its own field)",
        )
    schedule, zone = _known_schedule(name, row, cache)
    if zone is not None and zones:
        policy["timezone"] = zone
    options: dict[str, Any] = {"safebeat": policy}
    for option in ("queue", "exchange", "routing_key", "priority"):
        if row[option] not in (None, ""):
            options[option] = row[option]
    if headers:
        options["headers"] = headers
    if row["expire_seconds"] is not None:
        options["expires"] = int(row["expire_seconds"])
    elif row["expires"] is not None:
        options["expires"] = row["expires"]
    item = {
        "task": task,
        "schedule": schedule,
        "args": _json(name, "args", row["args"] or "[]", list),
        "kwargs": _json(name, "kwargs", row["kwargs"] or "{}", dict),
        "options": options,
    }
    timings = None if cache is None else cache.timings
    return described_entry(name, item, app_timezone=app_timezone, config=config, timings=timings)


def _json(name: str, field: str, text: str, kind: type) -> Any:
    empty = _EMPTY.get(text)
    if empty is kind:
        return empty()
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested thousands deep
        raise EntryError(name, f"{field} is not valid JSON ({exc}): {text[:80]!r}") from None
    if not isinstance(value, kind):
        expected = "a JSON array" if kind is list else "a JSON object"
        raise EntryError(name, f"{field} must be {expected}, got {text[:80]!r}")
    return value


def _known_schedule(
    name: str, row: Mapping[str, Any], cache: RowCache | None
) -> tuple[object, str | None]:
    """The row's schedule, the one object for every row of the same schedule in `cache`."""
    if cache is None:
        return _schedule(name, row)
    key = _schedule_key(row)
    known = cache.schedules.get(key)
    if known is None:
        known = cache.schedules[key] = _schedule(name, row)
    return known


def _schedule(name: str, row: Mapping[str, Any]) -> tuple[object, str | None]:
    """The row's schedule as a Celery schedule object, and a crontab's time zone name."""
    try:
        if row["interval__every"] is not None:
            period = row["interval__period"]
            if period not in _PERIODS:
                raise EntryError(name, f"unknown interval period {period!r}")
            return timedelta(**{period: int(row["interval__every"])}), None
        if row["crontab__minute"] is not None:
            crontab = schedules.crontab(
                minute=row["crontab__minute"],
                hour=row["crontab__hour"],
                day_of_week=row["crontab__day_of_week"],
                day_of_month=row["crontab__day_of_month"],
                month_of_year=row["crontab__month_of_year"],
            )
            return crontab, str(row["crontab_tz"] or "UTC")
        if row["solar__event"] is not None:
            return schedules.solar(
                row["solar__event"],
                float(Decimal(row["solar__latitude"])),
                float(Decimal(row["solar__longitude"])),
            ), None
        if row["clocked__clocked_time"] is not None:
            from django_celery_beat.clockedschedule import clocked  # noqa: PLC0415

            return clocked(row["clocked__clocked_time"]), None
    except EntryError:
        raise
    except Exception as exc:  # noqa: BLE001 - Celery raises several kinds for bad fields
        raise EntryError(name, f"bad schedule: {exc}") from None
    raise EntryError(name, "no schedule: set one of interval, crontab, solar or clocked")


def _never_matches(rule: CrontabRule, now: datetime, cache: RowCache | None) -> bool:
    if cache is None:
        return next_window(rule, now) is None
    known = cache.matches.get(id(rule))  # rules are shared: one per distinct crontab
    if known is None:
        known = cache.matches[id(rule)] = (rule, next_window(rule, now) is None)
    return known[1]


def _with_row_fields(
    entry: Entry, row: Mapping[str, Any], now: datetime, cache: RowCache | None
) -> Entry:
    """Apply start_time, the re-enable rule and one_off to a compiled entry."""
    rule, text, not_before = _row_timing(entry, entry.name, row, now, cache)
    digest = row_digest(entry.digest, text, not_before, bool(row["one_off"]))
    fields = list(_entry_fields(entry))  # `dataclasses.replace`, in a fraction of its time
    fields[_RULE], fields[_TEXT], fields[_DIGEST], fields[_NOT_BEFORE] = (
        rule,
        text,
        digest,
        not_before,
    )
    return Entry(*fields)


def _row_timing(
    entry: Entry, name: str, row: Mapping[str, Any], now: datetime, cache: RowCache | None
) -> tuple[Rule, str, datetime | None]:
    """Row `name`'s rule (`entry`'s, anchored at its start_time), the rule's text, and the
    earliest window it may dispatch."""
    rule = entry.rule
    start_time: datetime | None = row["start_time"]
    if start_time is not None:
        try:
            start_time = check_instant(start_time, "start_time")
        except LimitError as exc:
            raise EntryError(name, str(exc)) from None
    if isinstance(rule, IntervalRule) and start_time is not None:
        rule = IntervalRule(rule.every, anchor=start_time)
    if isinstance(rule, CrontabRule) and _never_matches(rule, now, cache):
        raise EntryError(name, f"crontab never matches: {describe(rule)}")
    # Windows missed before the row's last edit (a re-enable, say) are not caught up,
    # as with django-celery-beat's own scheduler; windows after it are the row's. A
    # clocked row's one window is the point of the row, even when set for a moment
    # before the edit that saved it.
    changed = None if isinstance(rule, ClockedRule) else row["date_changed"]
    not_before = max((f for f in (start_time, changed) if f is not None), default=None)
    text = entry.schedule_text if rule is entry.rule else describe(rule)
    return rule, text, not_before


def row_digest(digest: str, text: str, not_before: datetime | None, one_off: bool) -> str:
    """The digest of a row's entry: its item's, with the row's own fields. The text is
    `json.dumps([digest, text, {"not_before": str(not_before), "one_off": one_off}],
    sort_keys=True)`, written out (a test holds the two equal): it was made that way
    first, and a digest that changed would register every row again."""
    extra = (
        f'{{"not_before": {_quoted(str(not_before))}, "one_off": {"true" if one_off else "false"}}}'
    )
    payload = f"[{_quoted(digest)}, {_quoted(text)}, {extra}]"
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
