"""The exceptions safebeat raises; each message names its culprit and what to do."""

from __future__ import annotations

from datetime import datetime

#: Characters of a value an error message shows (see `shorten`).
SHOWN_CHARS = 80


class SafebeatError(Exception):
    """Base class of every error safebeat raises on purpose."""


class ConfigError(SafebeatError):
    """A `safebeat_*` setting or `SAFEBEAT_*` variable is unknown or has a bad value."""


class EntryError(SafebeatError):
    """One schedule entry is malformed; the other entries keep running."""

    def __init__(self, entry: str, problem: str) -> None:
        super().__init__(f"schedule entry {shorten(entry)}: {problem}")
        self.entry = entry
        self.problem = problem


class UnreadableState(EntryError):
    """The store holds a state of this entry that cannot be read back (a pause end past the
    year 9999 written by an older version, a row changed by hand): beat puts the entry
    aside and retries it later, and every other entry runs."""

    def __init__(self, entry: str, problem: str) -> None:
        super().__init__(
            entry,
            f"its state in the store cannot be read back ({problem}); the entry is put aside "
            "until it can, and the others run (`safebeat resume` rewrites a pause; else fix "
            "or delete the row)",
        )
        self.unreadable = problem


class ScheduleError(SafebeatError):
    """The schedule an app's beat runs cannot be read (django-celery-beat's tables)."""


class StoreError(SafebeatError):
    """The store failed in a way that retrying will not fix (bad schema, bad URL)."""

    #: Where the store's URL came from (`safebeat.config.url_origin`), where known: a
    #: command line says it with the error, since a stale `SAFEBEAT_URL` wins silently.
    url_origin: str | None = None


class StoreUnavailable(StoreError):
    """The store cannot be reached right now; beat retries with backoff and claims nothing."""


class TickTooLong(StoreUnavailable):
    """The store ended a tick (its transaction, or its lock) because the tick lasted longer
    than `safebeat_lock_timeout`; nothing of it was written. Beat claims fewer entries per
    tick and tries again at once."""


def shown(value: object) -> str:
    """`repr(value)` for an error message; never fails (a 5000-digit int has no repr)."""
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - a message about a value must not fail on that value
        return f"<a {type(value).__name__} that cannot be shown>"


def shorten(value: object, chars: int = SHOWN_CHARS) -> str:
    """`repr(value)` (an instant in ISO 8601), cut to about `chars` characters with the
    length said, for an error message about a value that may be huge; never fails."""
    text = value.isoformat() if isinstance(value, datetime) else shown(value)
    if len(text) <= chars:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} shown"
    return f"{text[: chars - 1]}… ({size})"
