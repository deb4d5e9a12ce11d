"""An entry's `options['safebeat']`: its policies (misfire, grace, overlap, time zone, bounds,
calendar, jitter, pause_after_failures), each validated with an error naming the entry."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from safebeat.calendars import parse_exclude
from safebeat.config import Config, parse_duration, parse_misfire, parse_overlap
from safebeat.errors import ConfigError, EntryError, shown
from safebeat.identity import format_window
from safebeat.limits import LimitError, check_instant
from safebeat.windows import (
    BoundedRule,
    Calendar,
    FilteredRule,
    IntervalRule,
    Jitter,
    Overlap,
    Policy,
    Rule,
)

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


def entry_name(name: object) -> str:
    """The name an error about entry `name` shows (it may not be a string at all)."""
    return name if isinstance(name, str) else shown(name)


def sorted_keys(keys: Iterable[object]) -> list[object]:
    """`keys` in order for a message, also when they are of types that do not compare."""
    return sorted(keys, key=lambda key: (type(key).__name__, shown(key)))


def unknown_keys(
    name: str, where: str, unknown: Iterable[object], known: Iterable[str], note: str = ""
) -> EntryError:
    """The error of entry `name` for keys in `where` that are none of `known`."""
    return EntryError(
        name, f"unknown {where} key(s) {sorted_keys(unknown)}; known: {sorted(known)}{note}"
    )


def entry_policy(
    name: str, options: object, config: Config, app_timezone: tzinfo
) -> tuple[Policy, tzinfo]:
    if not isinstance(options, Mapping):
        raise EntryError(name, f"options['safebeat'] must be a dict, got {shown(options)}")
    unknown = set(options) - POLICY_KEYS
    if unknown:
        raise unknown_keys(name, "options['safebeat']", unknown, POLICY_KEYS)
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
    zone = entry_zone(name, options["timezone"]) if "timezone" in options else app_timezone
    policy = Policy(
        misfire=misfire if misfire is not None else config.misfire,
        grace=grace if "grace" in options else config.grace,
        catchup_limit=limit,
    )
    return policy, zone


def entry_overlap(name: str, options: Mapping[str, Any], config: Config) -> Overlap:
    if "overlap" not in options:
        return config.overlap
    try:
        return parse_overlap(options["overlap"], "overlap")
    except ConfigError as exc:
        raise EntryError(name, f"options['safebeat']: {exc}") from None


def entry_pause_after_failures(name: str, options: Mapping[str, Any], config: Config) -> int | None:
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


def entry_bounds(name: str, rule: Rule, options: Mapping[str, Any]) -> Rule:
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
    if (
        isinstance(rule, FilteredRule)
        and isinstance(rule.base, IntervalRule)
        and rule.base.anchor is None
        and start is not None
    ):
        rule = FilteredRule(IntervalRule(rule.base.every, anchor=start), rule.keeps, rule.source)
    assert not isinstance(rule, BoundedRule)  # noqa: S101 - compile_rule never bounds a rule
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
        return check_instant(instant, f"options['safebeat']['{key}']")
    except LimitError as exc:
        raise EntryError(name, str(exc)) from None


def entry_calendar(name: str, options: Mapping[str, Any], zone: tzinfo) -> Calendar | None:
    if options.get("exclude") is None:
        return None
    try:
        return parse_exclude(options["exclude"], zone)
    except ConfigError as exc:
        raise EntryError(name, f"options['safebeat']['exclude']: {exc}") from None


def entry_jitter(name: str, options: Mapping[str, Any], key: str) -> Jitter | None:
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


def entry_zone(name: str, value: object) -> tzinfo:
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
