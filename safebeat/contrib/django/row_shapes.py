"""Rows of one shape: rows alike in all but their name, args, kwargs and own fields.

Most of a large table is rows of a few shapes (one task, one schedule, the same headers,
queue and expiry; a different argument each). The first row of a shape is compiled in
full (`safebeat.entries.compile_entry`); the rows after it take that entry's compiled
parts and work out only what is theirs: the name's limits and the digest, whose text is
the first row's with their own args and kwargs put in. Each entry is the one its row
compiles to alone, digest included (a test holds the two equal).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from operator import itemgetter
from typing import Any, NamedTuple

from safebeat.entries import Entry
from safebeat.entries.compiling import NO_MAPPING, NO_NAME
from safebeat.entries.digest import digest_text
from safebeat.errors import EntryError
from safebeat.limits import LimitError, check_name
from safebeat.windows import Rule

#: The values of a row that decide its schedule (`crontab_tz` is the raw time zone text).
SCHEDULE_FIELDS = (
    "interval__every",
    "interval__period",
    "crontab__minute",
    "crontab__hour",
    "crontab__day_of_week",
    "crontab__day_of_month",
    "crontab__month_of_year",
    "crontab_tz",
    "solar__event",
    "solar__latitude",
    "solar__longitude",
    "clocked__clocked_time",
)
#: The values of a row that decide all of its entry but its name, args and kwargs (the
#: row's own fields, applied after, aside): two rows equal in these are of one shape.
SHAPE_FIELDS = (
    "task",
    "headers",
    "queue",
    "exchange",
    "routing_key",
    "priority",
    "expire_seconds",
    "expires",
    *SCHEDULE_FIELDS,
)
shape_key = itemgetter(*SHAPE_FIELDS)
#: Put in a shape's digest text where a row's args and kwargs go (text no row can hold).
_ARGS, _KWARGS = "\x00safebeat-row-args\x00", "\x00safebeat-row-kwargs\x00"


#: `digest_text` of a value parsed from JSON, by one encoder made once (`json` makes one
#: for each value): such a value holds no cycle, so it keeps no markers to find one.
_parsed_text = (
    c_make_encoder(None, None, encode_basestring_ascii, None, ": ", ", ", True, False, True)
    if c_make_encoder is not None
    else None
)


def _json_text(value: list[Any] | dict[str, Any]) -> str:
    """`value` (parsed from JSON) as `digest_text` writes it."""
    if not value:
        return "[]" if isinstance(value, list) else "{}"
    if _parsed_text is None:
        return digest_text(value)
    return "".join(_parsed_text(value, 0))


class Shape(NamedTuple):
    """A first row's entry, and its digest's text around the args and the kwargs."""

    entry: Entry
    head: str
    middle: str
    tail: str


def shape_of(entry: Entry, described: dict[str, object]) -> Shape | None:
    """The shape of the row compiled to `entry`; None if its digest text cannot be split
    (then each row of it is compiled in full)."""
    if entry.policy.jitter is not None:  # a jitter is keyed by the entry's name
        return None
    try:
        text = digest_text({**described, "args": _ARGS, "kwargs": _KWARGS})
    except (TypeError, ValueError, RecursionError):
        return None
    args, kwargs = digest_text(_ARGS), digest_text(_KWARGS)
    if text.count(args) != 1 or text.count(kwargs) != 1:
        return None
    head, rest = text.split(args)
    middle, tail = rest.split(kwargs)
    return Shape(entry, head, middle, tail)


def shape_digest(shape: Shape, name: str, args: list[Any], kwargs: dict[str, Any]) -> str:
    """The digest `compile_entry` gives row `name` of `shape` with its own args and kwargs
    (before the row's own fields); raise EntryError as it does for what is the row's own."""
    if not name:  # refused in `compile_entry`'s words, not the name limit's
        raise EntryError(name, NO_NAME)
    try:
        check_name(name)
    except LimitError as exc:
        raise EntryError(name, exc.unnamed) from None
    try:
        text = f"{shape.head}{_json_text(args)}{shape.middle}{_json_text(kwargs)}{shape.tail}"
    except (ValueError, RecursionError) as exc:  # as `compile_entry`'s digest refuses them
        raise EntryError(
            name, f"args, kwargs and options must be plain data Celery can send ({exc})"
        ) from None
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def entry_of_shape(
    shape: Shape,
    name: str,
    args: list[Any],
    kwargs: dict[str, Any],
    *,
    rule: Rule,
    schedule_text: str,
    digest: str,
    not_before: datetime | None,
) -> Entry:
    """The entry of row `name` of `shape`: its own args and kwargs, and the row's own
    rule, digest and earliest window; the rest is the shape's."""
    template = shape.entry
    return Entry(
        name,
        template.task,
        rule,
        template.policy,
        schedule_text,
        digest,
        tuple(args),
        kwargs or NO_MAPPING,
        template.options,
        template.overlap,
        not_before,
        template.pause_after_failures,
        template.zone,
    )
