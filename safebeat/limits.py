"""What every store can hold and read back: the one place the limits on outside values live.

Every value that comes from outside (settings, `beat_schedule`, django-celery-beat rows,
`safebeat.schedules`, the CLI, the console, the admin) passes these checks once, before
anything is stored, so a value one store would refuse, or store and then fail to read back,
is refused in every store, with a `LimitError` naming the value and the limit. The checks
sit where every surface passes: entry compilation (`safebeat.entries`), the settings
(`safebeat.config`), the stored entries (`safebeat.entries.runtime_definitions`) and the operator
actions
(`safebeat.ops.operations`). docs/limits.md lists them for users; keep the two in step.

Why these numbers:

- names and namespaces are bounded in UTF-8 bytes so that a namespace and an entry name
  together (300 bytes, 355 with a task name) fit, with a window, in every key layout:
  PostgreSQL's btree index rows (at most 2,704 bytes), MySQL/MariaDB's key columns
  (`varchar(128)` namespaces and `varchar(512)` entries in utf8mb4), Redis keys and
  Prometheus labels;
- no NUL (PostgreSQL text cannot hold one), only valid UTF-8 (a lone surrogate cannot be
  encoded, so no driver can send it), no control characters in names (they break log
  lines, tables and the keys' separators);
- instants between year 2 and year 9998 in UTC: Python's datetime holds years 1 to 9999,
  and an instant near either end overflows when it is moved to another zone (an offset is
  at most a day), which is what every store does when it writes or reads it back;
- a namespace without `{` or `}`: it is the Redis Cluster hash tag of every key of the
  namespace (`safebeat:{namespace}:...`), and a brace inside it would spread them over
  slots;
- timeouts of at least 1 ms: PostgreSQL reads a timeout of `0ms` as "no timeout".
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone

from safebeat.errors import ConfigError, shorten

#: Longest entry name, in UTF-8 bytes.
NAME_BYTES = 255
#: Longest task name, in UTF-8 bytes.
TASK_BYTES = 255
#: Longest namespace, in UTF-8 bytes.
NAMESPACE_BYTES = 100
#: Longest actor (who acted, in the audit trail), in UTF-8 bytes.
ACTOR_BYTES = 255
#: Longest operator note (a pause's, a trigger's, ...), in characters.
NOTE_CHARS = 1000
#: Earliest and latest instant a value may name, in UTC.
MIN_INSTANT = datetime(2, 1, 1, tzinfo=timezone.utc)
MAX_INSTANT = datetime(9998, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)
#: Shortest timeout a setting may give.
MIN_TIMEOUT = timedelta(milliseconds=1)
#: Longest duration any setting or option takes: far beyond any sensible value, and short
#: enough that `now ± duration` stays a valid datetime.
MAX_DURATION = timedelta(days=36500)
#: Deepest nesting of lists and dicts in the args, kwargs and options of an entry added at
#: run time (`safebeat.entries.runtime_definitions.encode`, the CLI's JSON options).
MAX_DEPTH = 100
#: Where the limits are written down for users.
DOCS = "docs/limits.md"


class LimitError(ConfigError, ValueError):
    """A value from outside that not every store could hold and read back: names the value
    (`what`, a shortened repr) and the limit it breaks. A `ConfigError` (the CLI, the
    console and the admin show it as one line) and a `ValueError`."""

    def __init__(self, what: str, value: object, problem: str) -> None:
        super().__init__(f"{what} {shorten(value)} {problem} (limits: {DOCS})")
        self.what = what
        self.value = value
        self.problem = problem

    @property
    def unnamed(self) -> str:
        """The message without the value, where the message names it already."""
        return f"{self.what} {self.problem} (limits: {DOCS})"


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise LimitError(what, value, f"is a {type(value).__name__}, not text")
    if "\x00" in value:
        raise LimitError(what, value, "holds a NUL character, which PostgreSQL cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        raise LimitError(
            what, value, f"holds U+{ord(bad):04X}, a lone surrogate, which is not UTF-8"
        ) from None
    return value


def _no_controls(value: str, what: str) -> None:
    for char in value:
        if unicodedata.category(char) in {"Cc", "Zl", "Zp"}:
            raise LimitError(
                what,
                value,
                f"holds the control character U+{ord(char):04X}; names hold no control "
                "characters or line breaks",
            )


def _bounded_bytes(value: str, what: str, limit: int) -> None:
    size = len(value.encode("utf-8"))
    if size > limit:
        raise LimitError(what, value, f"is {size} UTF-8 bytes long; the limit is {limit}")


def check_name(value: object, what: str = "entry name", *, limit: int = NAME_BYTES) -> str:
    """`value` if it is a name every store holds: non-empty text, valid UTF-8, no NUL or
    control character, at most `limit` UTF-8 bytes; else LimitError naming `what`."""
    if type(value) is str and value.isascii() and value.isprintable() and value:
        # The common name, checked at the cost of two scans: printable ASCII holds no NUL,
        # surrogate or control character, and is as many bytes as characters.
        if len(value) > limit:
            raise LimitError(what, value, f"is {len(value)} UTF-8 bytes long; the limit is {limit}")
        return value
    text = _text(value, what)
    if not text:
        raise LimitError(what, value, "is empty")
    _no_controls(text, what)
    _bounded_bytes(text, what, limit)
    return text


def check_task(value: object) -> str:
    """A task name every store holds (see `check_name`)."""
    return check_name(value, "task name", limit=TASK_BYTES)


def check_namespace(value: object, what: str = "namespace") -> str:
    """A namespace every store holds: a name (see `check_name`) of at most
    `NAMESPACE_BYTES`, without `{` or `}` (the Redis Cluster hash tag)."""
    text = check_name(value, what, limit=NAMESPACE_BYTES)
    if "{" in text or "}" in text:
        raise LimitError(
            what,
            value,
            "holds '{' or '}'; it is the Redis Cluster hash tag of its keys, which a brace "
            "would spread over slots",
        )
    return text


def check_actor(value: object) -> str:
    """Who acts, as the audit trail records it (see `check_name`)."""
    return check_name(value, "actor", limit=ACTOR_BYTES)


def check_note(value: object, what: str = "note") -> str | None:
    """An operator's note every store holds: None, or text without NUL, valid UTF-8, of
    at most `NOTE_CHARS` characters (line breaks allowed)."""
    if value is None:
        return None
    text = _text(value, what)
    if len(text) > NOTE_CHARS:
        raise LimitError(what, value, f"is {len(text)} characters long; the limit is {NOTE_CHARS}")
    return text


def check_instant(value: object, what: str) -> datetime:
    """`value` as an aware UTC datetime, if it is one inside [MIN_INSTANT, MAX_INSTANT]
    after conversion to UTC; else LimitError naming `what`."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise LimitError(what, value, "is not an aware datetime (one with a time zone)")
    try:
        utc = value.astimezone(timezone.utc)
    except OverflowError:
        utc = None
    if utc is None or not MIN_INSTANT <= utc <= MAX_INSTANT:
        raise LimitError(
            what, value, f"is outside the years {MIN_INSTANT.year} to {MAX_INSTANT.year} (UTC)"
        )
    return utc


def check_timeout(value: timedelta, what: str) -> timedelta:
    """`value` if it is at least `MIN_TIMEOUT`; else LimitError naming `what`."""
    if value < MIN_TIMEOUT:
        raise LimitError(
            what, value, "is shorter than 1 ms, the shortest timeout every store keeps"
        )
    return value


def check_depth(value: object, what: str, *, limit: int = MAX_DEPTH) -> None:
    """Refuse `value` if its lists, tuples and dicts nest deeper than `limit` (counted
    without recursion, so a value nested 100,000 deep is refused, not a RecursionError)."""
    if not value or isinstance(value, str | bytes | int | float):
        return
    stack: list[tuple[object, int]] = [(value, 0)]
    deepest: dict[int, int] = {}  # a container seen at this depth needs no second look above it
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: list[object] = [*item.keys(), *item.values()]
        elif isinstance(item, list | tuple | set | frozenset):
            children = list(item)
        else:
            continue
        if deepest.get(id(item), -1) >= depth:
            continue
        deepest[id(item)] = depth
        if depth + 1 > limit:
            raise LimitError(what, _Nested(), f"nests lists and dicts more than {limit} deep")
        stack.extend((child, depth + 1) for child in children)


class _Nested:
    """Stands for a value too deep to show."""

    def __repr__(self) -> str:
        return "<deeply nested data>"
