"""An entry's digest: everything it sends and when, hashed the same in every process, so a
changed definition is seen as changed and an unchanged one keeps its digest."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone, tzinfo

from safebeat.calendars import describe_calendar
from safebeat.entries.text import seconds_text
from safebeat.errors import shown
from safebeat.windows import Calendar, Jitter, Misfire, Overlap


def policy_parts(
    overlap: Overlap, calendar: Calendar | None, jitter: Jitter | None, pause_after: int | None
) -> dict[str, object]:
    """The digest's parts for policies an entry sets: each only when set, so that the
    digests of existing entries stay what they were."""
    parts: dict[str, object] = {}
    if overlap is not Overlap.ALLOW:
        parts["overlap"] = overlap.value
    if calendar is not None:
        parts["exclude"] = describe_calendar(calendar)
        # The days are days in the entry's zone, which an interval's schedule text does not
        # tell: another zone skips other windows. UTC adds nothing, as before.
        zone = _zone_text(calendar.tz)
        if zone is not None:
            parts["exclude_zone"] = zone
    if jitter is not None:
        parts["jitter"] = seconds_text(jitter.spread)
    if pause_after is not None:
        parts["pause_after_failures"] = pause_after
    return parts


#: The names of UTC itself.
_UTC_NAMES = frozenset(
    {"UTC", "Etc/UTC", "UCT", "Etc/UCT", "Universal", "Etc/Universal", "Zulu", "Etc/Zulu"}
)


def _zone_text(zone: tzinfo) -> str | None:
    """`zone`'s name for a digest (a fixed offset: "UTC+05:00"); None for UTC."""
    key = getattr(zone, "key", None)
    if isinstance(key, str):
        return None if key in _UTC_NAMES else key
    if isinstance(zone, timezone):
        return None if zone.utcoffset(None) == timedelta(0) else str(zone)
    return str(getattr(zone, "zone", None) or zone)


def entry_digest(payload: Mapping[str, object]) -> str:
    """A digest of everything an entry sends and when, stable across processes."""
    try:
        text = _ENCODER.encode(payload)
    except TypeError:
        # Keys JSON cannot sort ({1: "a", "b": 2}) or hold (a tuple). Only then this other
        # form, so that the digest of every entry that had one stays what it was.
        text = _ENCODER.encode(_typed_keys(payload))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def digest_text(value: object) -> str:
    """`value` as `entry_digest` writes it (keys sorted), where it is plain JSON."""
    return _ENCODER.encode(value)


def entry_digest_with_args(
    args: object, tail: str, payload: Callable[[], Mapping[str, object]]
) -> str:
    """`entry_digest(payload())` where `tail` is the JSON of the payload without its "args"
    (which sorts first), so that entries alike but for their arguments encode the rest
    once: the same text, so the same digest."""
    try:
        head = _ENCODER.encode(args)
    except TypeError:
        return entry_digest(payload())
    text = f'{{"args": {head}, {tail[1:]}'
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def digest_tail(payload: Mapping[str, object]) -> str | None:
    """The JSON of `payload` without its "args", for `entry_digest_with_args`; None where
    it takes the other form (keys JSON cannot sort or hold)."""
    try:
        return _ENCODER.encode({key: value for key, value in payload.items() if key != "args"})
    except TypeError:
        return None


def _stable_text(value: object) -> str:
    """Text for values JSON cannot hold; never a repr with a memory address in it."""
    if isinstance(value, datetime | timedelta | Misfire):
        return str(value)
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


#: `json.dumps(payload, sort_keys=True, default=_stable_text)` without making an encoder
#: for each of 1,000,000 entries.
_ENCODER = json.JSONEncoder(sort_keys=True, default=_stable_text)


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
