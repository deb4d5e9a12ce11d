"""Stable names: task ids of windows, the window's wire format and message headers, and this
replica's identity."""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache

#: Fixed root of every task id safebeat derives; changing it would change every id.
TASK_ID_NAMESPACE = uuid.UUID("5a7e6ea7-0c1a-5b3e-9d2f-8c0f1e2d3b4a")

#: Message headers safebeat adds to every task it sends: the entry, its window
#: (`format_window`), and the entry again under the name django-celery-beat uses.
ENTRY_HEADER = "safebeat_entry"
WINDOW_HEADER = "safebeat_window"
#: Set on the messages of an entry with `pause_after_failures`: the worker hook pauses the
#: entry after that many consecutive failed runs.
PAUSE_AFTER_FAILURES_HEADER = "safebeat_pause_after_failures"
PERIODIC_TASK_HEADER = "periodic_task_name"
#: Sent as "forbid" for an entry with `overlap="forbid"`: the worker hook then starts no
#: window of the entry while another of its windows runs with a live lease.
OVERLAP_HEADER = "safebeat_overlap"
#: Stock beat marks its messages with it; tools that look for it keep working.
BEAT_TASK_HEADER = "celery_beat_task"
#: The IANA name of the zone the entry's schedule speaks, where it is not UTC:
#: `current_window().local_date` is the window's date there.
TIMEZONE_HEADER = "safebeat_timezone"
#: Every header beat may set on a window's message (`beat.message_fields.headers_for`).
#: The worker hook carries each of them over to a copy it sends again, so the two lists
#: cannot drift: add a header here, or the copy that later takes a run over loses it.
WINDOW_MESSAGE_HEADERS = (
    ENTRY_HEADER,
    WINDOW_HEADER,
    PERIODIC_TASK_HEADER,
    BEAT_TASK_HEADER,
    OVERLAP_HEADER,
    PAUSE_AFTER_FAILURES_HEADER,
    TIMEZONE_HEADER,
)


@lru_cache(maxsize=4096)  # a burst formats the same few windows for thousands of claims
def format_window(window: datetime) -> str:
    """Return the window as ISO 8601 in UTC with a `Z` suffix (the `safebeat_window` header)."""
    text = window.astimezone(timezone.utc).isoformat(timespec="auto")
    return text.replace("+00:00", "Z")


def parse_window(text: str) -> datetime:
    """Inverse of format_window: an aware UTC datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)


def task_id_for(namespace: str, entry: str, window: datetime) -> str:
    """Return the deterministic task id `uuid5(namespace, entry, window)` of one window.

    Every replica derives the same id for the same window, so a re-published claim
    carries the id of the first publish and a worker can recognise the duplicate.
    """
    name = "\x1f".join((namespace, entry, format_window(window)))
    return _uuid5_text(name)


_NAMESPACE_BYTES = TASK_ID_NAMESPACE.bytes
#: The version-5 variant nibble of a task id's 17th hex digit, by the digest's own nibble:
#: `(nibble & 0x3) | 0x8`, as `uuid.UUID(..., version=5)` sets it.
_VARIANT = {f"{n:x}": f"{(n & 0x3) | 0x8:x}" for n in range(16)}


def _uuid5_text(name: str) -> str:
    """`str(uuid.uuid5(TASK_ID_NAMESPACE, name))`, without building a UUID object (a burst
    derives one per claim)."""
    digest = hashlib.sha1(_NAMESPACE_BYTES + name.encode(), usedforsecurity=False).hexdigest()
    return (
        f"{digest[:8]}-{digest[8:12]}-5{digest[13:16]}-"
        f"{_VARIANT[digest[16]]}{digest[17:20]}-{digest[20:32]}"
    )


@dataclass(frozen=True)
class Replica:
    """Who is ticking: host, process and a token that tells restarts apart (pid 1 repeats)."""

    host: str
    pid: int
    token: str

    @property
    def id(self) -> str:
        return f"{self.host}:{self.pid}:{self.token}"


_current: Replica | None = None


def current_replica() -> Replica:
    """Return this process's replica identity, made once per process (and anew after fork)."""
    global _current  # noqa: PLW0603 - one identity per process, rebuilt after fork
    pid = os.getpid()
    if _current is None or _current.pid != pid:
        _current = Replica(host=socket.gethostname(), pid=pid, token=secrets.token_hex(3))
    return _current
