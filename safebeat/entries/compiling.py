"""A `beat_schedule` item, validated and compiled into an `Entry`; a whole schedule at once,
with each bad entry's error kept apart."""

from __future__ import annotations

import dataclasses
import sys
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta, tzinfo
from types import MappingProxyType
from typing import Any, TypeVar, cast

from safebeat.config import Config
from safebeat.entries.digest import (
    digest_tail,
    entry_digest,
    entry_digest_with_args,
    policy_parts,
)
from safebeat.entries.entry import Entry
from safebeat.entries.options import (
    entry_bounds,
    entry_calendar,
    entry_jitter,
    entry_name,
    entry_overlap,
    entry_pause_after_failures,
    entry_policy,
    sorted_keys,
)
from safebeat.entries.rules import compile_rule
from safebeat.entries.text import describe
from safebeat.errors import EntryError, shown
from safebeat.limits import LimitError, check_name, check_task
from safebeat.windows import Overlap, Policy, Rule

ENTRY_KEYS = frozenset({"task", "schedule", "args", "kwargs", "options", "relative"})
#: Options safebeat sets itself on every message, so an entry may not set them.
RESERVED_OPTIONS = frozenset({"task_id"})
_Shared = TypeVar("_Shared", bound=Rule | Policy)
#: One object per distinct rule and policy, shared by every entry that has it: a crontab's
#: sets of days and months alone cost about 2.5 KB per entry when each entry has its own.
_SHARED: weakref.WeakValueDictionary[object, Any] = weakref.WeakValueDictionary()
#: The kwargs and options of every entry that has none: one read-only mapping, not an empty
#: dict per entry (two of them are about 130 bytes of each entry).
_NONE: Mapping[str, Any] = MappingProxyType({})
NO_MAPPING = _NONE
#: What an entry without a name is told (a django-celery-beat row of one shape too).
NO_NAME = "an entry name must be a non-empty string"
#: The field names of each rule and policy class, as `_shared` reads them for every entry.
_FIELDS: dict[type, tuple[str, ...]] = {}
#: Schedules equal by value (`3600.0`, `timedelta(hours=1)`) give equal timings; any other
#: schedule object is known by its identity.
_BY_VALUE = frozenset({int, float, str, timedelta})
#: The types of plain data a timing may be looked up by (see `_plain`).
_PLAIN = frozenset({str, int, float, bool})


@dataclass(frozen=True, slots=True)
class Timing:
    """When an entry's windows fall: what its schedule and safebeat options compile to,
    the same for every entry of one schedule object and the same safebeat options."""

    rule: Rule
    policy: Policy  # with its calendar, without a jitter (the jitter is the entry's own)
    overlap: Overlap
    pause_after: int | None
    schedule_text: str
    zone: tzinfo
    #: Per task, the JSON of an entry's digest but its arguments, for entries of this
    #: timing without kwargs, options or jitter (None: the digest's other form).
    digest_tails: dict[str, str | None] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )


#: The timings one `compile_schedule` worked out, by schedule (see `_known_timing`), each
#: with the schedule object, which is held so that its identity is not reused.
Timings = dict[tuple[object, ...], tuple[object, Timing]]


def _shared(value: _Shared) -> _Shared:
    """The object equal to `value` that other entries already hold, else `value` itself.

    The key is the fields, not the object: a key holding the object would keep it alive.
    """
    names = _FIELDS.get(type(value))
    if names is None:
        names = _FIELDS[type(value)] = tuple(f.name for f in dataclasses.fields(value))
    key = (type(value), *(getattr(value, name) for name in names))
    try:
        return cast(_Shared, _SHARED.setdefault(key, value))
    except TypeError:  # a field that cannot be hashed: the entry keeps its own
        return value


def compile_schedule(
    beat_schedule: Mapping[str, Any], *, app_timezone: tzinfo, config: Config
) -> tuple[dict[str, Entry], dict[str, EntryError]]:
    """Compile every entry; return (good entries, errors of the bad ones) by name. Entries
    with one schedule and the same plain safebeat options compile their timing once."""
    entries: dict[str, Entry] = {}
    errors: dict[str, EntryError] = {}
    timings: Timings = {}
    for name, raw in beat_schedule.items():
        try:
            entries[name] = compile_entry(
                name, raw, app_timezone=app_timezone, config=config, timings=timings
            )
        except EntryError as exc:
            errors[name] = exc
        except Exception as exc:  # noqa: BLE001 - one entry's surprise must not stop the rest
            detail = " ".join(str(exc).split())
            errors[name] = EntryError(
                entry_name(name),
                f"cannot be compiled ({type(exc).__name__}: {detail}); fix or remove the entry",
            )
    return entries, errors


def compile_entry(
    name: str,
    raw: object,
    *,
    app_timezone: tzinfo,
    config: Config,
    timings: Timings | None = None,
) -> Entry:
    """Validate one `beat_schedule` item and compile its rule; raise EntryError on bad input.

    `timings`: those already worked out for other entries of the same schedule (and where
    to add this one's)."""
    return described_entry(name, raw, app_timezone=app_timezone, config=config, timings=timings)[0]


def described_entry(
    name: str,
    raw: object,
    *,
    app_timezone: tzinfo,
    config: Config,
    timings: Timings | None = None,
) -> tuple[Entry, Callable[[], dict[str, object]]]:
    """`compile_entry`'s entry, and a function making what its digest was made of
    (`entry_digest`'s payload; made only when asked)."""
    if not isinstance(name, str) or not name:
        raise EntryError(entry_name(name), NO_NAME)
    if type(raw) is not dict and not isinstance(raw, Mapping):  # dict: the common case, fast
        raise EntryError(name, f"expected a dict with 'task' and 'schedule', got {shown(raw)}")
    if not ENTRY_KEYS.issuperset(raw):
        unknown = set(raw) - ENTRY_KEYS
        raise EntryError(
            name, f"unknown key(s) {sorted_keys(unknown)}; an entry has {sorted(ENTRY_KEYS)}"
        )
    task = raw.get("task")
    if not isinstance(task, str) or not task:
        raise EntryError(name, f"'task' must be a task name, got {shown(task)}")
    within_limits(name, task)
    args = raw.get("args") or ()
    if not isinstance(args, list | tuple):
        raise EntryError(name, f"'args' must be a list or tuple, got {type(args).__name__}")
    kwargs = raw.get("kwargs") or {}
    if type(kwargs) is not dict and not isinstance(kwargs, Mapping):
        raise EntryError(name, f"'kwargs' must be a dict, got {type(kwargs).__name__}")
    options = _options(name, raw.get("options"))
    safebeat_options = options.pop("safebeat", None) or {}
    reserved = RESERVED_OPTIONS.intersection(options) if options else None
    if reserved:
        raise EntryError(name, f"options {sorted(reserved)} are set by safebeat per window")
    if "schedule" not in raw:
        raise EntryError(name, "'schedule' is missing")
    timing = _known_timing(name, raw, safebeat_options, app_timezone, config, timings=timings)
    rule, policy, overlap = timing.rule, timing.policy, timing.overlap
    pause_after, schedule_text, calendar = timing.pause_after, timing.schedule_text, policy.calendar
    jitter = entry_jitter(name, safebeat_options, f"{config.namespace}/{name}")
    if jitter is not None:
        policy = _shared(dataclasses.replace(policy, jitter=jitter))

    def described() -> dict[str, object]:
        payload: dict[str, object] = {
            "task": task,
            "schedule": schedule_text,
            "args": args,
            "kwargs": kwargs,
            "options": options,
            "policy": [policy.misfire.value, str(policy.grace), policy.catchup_limit],
        }
        payload.update(policy_parts(overlap, calendar, jitter, pause_after))
        return payload

    try:
        if jitter is None and not kwargs and not options:
            # Alike but for their arguments: the rest of the digest's text is the timing's.
            tails = timing.digest_tails
            tail = (
                tails[task] if task in tails else tails.setdefault(task, digest_tail(described()))
            )
            digest = (
                entry_digest(described())
                if tail is None
                else entry_digest_with_args(args, tail, described)
            )
        else:
            digest = entry_digest(described())
    except (ValueError, RecursionError) as exc:  # a 5000-digit int, a list holding itself
        raise EntryError(
            name, f"args, kwargs and options must be plain data Celery can send ({exc})"
        ) from None
    entry = Entry(
        name,
        task,
        rule,
        policy,
        schedule_text,
        digest,
        tuple(args),
        kwargs or _NONE,
        options or _NONE,
        overlap,
        pause_after_failures=pause_after,
        zone=timing.zone,
    )
    return entry, described


def within_limits(name: str, task: str) -> None:
    """Raise EntryError if the entry's name or task breaks a limit of `safebeat.limits`:
    what not every store could hold and read back. (Data nested too deep to serialise is
    refused by the digest, `entry_digest`, at no cost to the entries that are not.)"""
    try:
        check_name(name)
    except LimitError as exc:
        raise EntryError(name, exc.unnamed) from None
    try:
        check_task(task)
    except LimitError as exc:
        raise EntryError(name, str(exc)) from None


def _known_timing(
    name: str,
    raw: Mapping[str, Any],
    options: Mapping[str, Any],
    app_timezone: tzinfo,
    config: Config,
    *,
    timings: Timings | None,
) -> Timing:
    """Entry `name`'s timing: one in `timings` if an entry of the same schedule and the
    same plain safebeat options compiled it already, else compiled here (and added to
    `timings`)."""
    schedule, relative = raw["schedule"], raw.get("relative")
    settings = _plain(options) if options else ()
    if timings is None or settings is None or not (relative is None or isinstance(relative, bool)):
        return _timing(name, raw, options, app_timezone, config)
    # By value for a plain value; else by identity, valid while the object lives (the
    # `timings` hold it).
    key = (
        type(schedule),
        schedule if type(schedule) in _BY_VALUE else id(schedule),
        relative,
        settings,
    )
    known = timings.get(key)
    if known is None:
        timing = _timing(name, raw, options, app_timezone, config)
        timings[key] = (schedule, timing)
        return timing
    return known[1]


def _plain(value: object) -> object:
    """`value` as a key, when it is made of plain data (text, numbers, lists and dicts of
    them: a django-celery-beat row's safebeat headers, say), each value with its type so
    that `1` and `True` differ; None for anything else (its timing is compiled alone)."""
    if isinstance(value, Mapping):
        items = []
        for key, item in value.items():
            known = _plain(item)
            if known is None or not isinstance(key, str):
                return None
            items.append((key, known))
        return (dict, tuple(sorted(items)))
    if isinstance(value, list | tuple):
        known_items = tuple(_plain(item) for item in value)
        return None if None in known_items else (type(value), known_items)
    if value is None or type(value) in _PLAIN:
        return (type(value), value)
    return None


def _timing(
    name: str,
    raw: Mapping[str, Any],
    options: Mapping[str, Any],
    app_timezone: tzinfo,
    config: Config,
) -> Timing:
    """Compile the timing of entry `name`: its rule, policy, overlap and failure pause."""
    policy, zone = entry_policy(name, options, config, app_timezone)
    overlap = entry_overlap(name, options, config)
    pause_after = entry_pause_after_failures(name, options, config)
    rule = entry_bounds(
        name,
        compile_rule(
            name, raw["schedule"], relative=_relative(name, raw.get("relative")), zone=zone
        ),
        options,
    )
    calendar = entry_calendar(name, options, zone)
    if calendar is not None:
        policy = dataclasses.replace(policy, calendar=calendar)
    return Timing(
        _shared(rule),
        _shared(policy),
        overlap,
        pause_after,
        sys.intern(describe(rule)),  # one string per distinct schedule
        zone,
    )


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
            name, f"'options' keys are apply_async keyword names, so text; got {sorted_keys(odd)}"
        )
    return dict(value)


def _relative(name: str, value: object) -> bool:
    """The entry's `relative` flag: True or False (None: not set)."""
    if value is None or isinstance(value, bool):
        return bool(value)
    raise EntryError(name, f"'relative' must be True or False, got {shown(value)}")
