"""The fields of one window's message, whichever way it is published: its arguments,
headers and options (`message_for`), its arguments' reprs, and the time to live of an
expiry, each computed as Celery's `send_task`/`as_task_v2` would compute it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from celery.beat import BeatLazyFunc
from celery.utils.saferepr import saferepr
from celery.utils.time import maybe_make_aware

from safebeat.entries import Entry
from safebeat.identity import (
    BEAT_TASK_HEADER,
    ENTRY_HEADER,
    OVERLAP_HEADER,
    PAUSE_AFTER_FAILURES_HEADER,
    PERIODIC_TASK_HEADER,
    TIMEZONE_HEADER,
    WINDOW_HEADER,
    format_window,
)
from safebeat.records import Claim
from safebeat.windows import Overlap

logger = logging.getLogger("safebeat.publishing")

#: A message's (args, kwargs, options), as `send_task`/`apply_async` take them.
Arguments = tuple[list[Any], dict[str, Any], dict[str, Any]]


def message_for(entry: Entry, claim: Claim) -> Arguments:
    """Return (args, kwargs, options) for `send_task`/`apply_async` of one claimed window.

    The task id is the claim's deterministic id, so a re-publish carries the same id.
    Lazy arguments (`celery.beat.BeatLazyFunc`) are evaluated now, as stock beat does.
    """
    args = [_evaluate(value) for value in entry.args]
    kwargs = {key: _evaluate(value) for key, value in entry.kwargs.items()}
    options = dict(entry.options)
    options.pop("headers", None)
    options["headers"] = headers_for(entry, format_window(claim.window))
    options["task_id"] = claim.task_id
    return args, kwargs, options


def headers_for(entry: Entry, window: str) -> dict[str, Any]:
    """The headers of one window's message: the entry's own, then safebeat's (each of
    `identity.WINDOW_MESSAGE_HEADERS`, which the worker hook carries to a deferred copy)."""
    headers: dict[str, Any] = dict(entry.options.get("headers") or {})
    headers.update(
        {
            ENTRY_HEADER: entry.name,
            WINDOW_HEADER: window,
            PERIODIC_TASK_HEADER: entry.name,
            BEAT_TASK_HEADER: True,
        }
    )
    if entry.overlap is Overlap.FORBID:
        headers[OVERLAP_HEADER] = Overlap.FORBID.value
    if entry.pause_after_failures is not None:
        headers[PAUSE_AFTER_FAILURES_HEADER] = entry.pause_after_failures
    zone = zone_key(entry.zone)
    if zone is not None:
        headers[TIMEZONE_HEADER] = zone
    return headers


def zone_key(zone: tzinfo) -> str | None:
    """The IANA name a worker can look `zone` up by, or None for UTC or a zone without one
    (a fixed offset: the window's local date is then told in UTC)."""
    key = getattr(zone, "key", None)
    return key if isinstance(key, str) and key not in ("UTC", "Etc/UTC") else None


def _evaluate(value: object) -> object:
    return value() if isinstance(value, BeatLazyFunc) else value


def has_lazy_arguments(entry: Entry) -> bool:
    """Whether the entry's arguments are evaluated per window (`celery.beat.BeatLazyFunc`)."""
    return any(isinstance(v, BeatLazyFunc) for v in (*entry.args, *entry.kwargs.values()))


def argument_reprs(
    amqp: Any, args: list[Any], kwargs: dict[str, Any], *, levels: int
) -> tuple[str, str]:
    """The message's argsrepr and kwargsrepr, as as_task_v2 computes them."""
    # as as_task_v2 does: no arguments at all is shown as ()
    return (
        plain_repr(args or (), amqp.argsrepr_maxsize)
        or saferepr(args or (), amqp.argsrepr_maxsize, maxlevels=levels),
        plain_repr(kwargs, amqp.kwargsrepr_maxsize)
        or saferepr(kwargs, amqp.kwargsrepr_maxsize, maxlevels=levels),
    )


#: Values whose saferepr is their repr, as long as it is short (see plain_repr).
_PLAIN = frozenset({int, float, bool, type(None)})
#: Far below Celery's smallest argsrepr/kwargsrepr limit and saferepr's string limit.
_PLAIN_LENGTH = 100


def plain_repr(value: list[Any] | tuple[Any, ...] | dict[str, Any], maxsize: int) -> str | None:
    """`repr(value)` where that is what Celery's `saferepr` gives (a short, flat list,
    tuple or dict of numbers, None and plain ASCII strings), else None: saferepr costs
    more than the rest of a message's fields together."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if not (_plain(key) and _plain(item)):
            return None
    text = repr(value)
    return text if len(text) < min(_PLAIN_LENGTH, maxsize) else None


def _plain(value: object) -> bool:
    if isinstance(value, str) and type(value) is str:
        # saferepr quotes and escapes other strings its own way
        return value.isascii() and value.isprintable() and not {"\\", "'"} & set(value)
    return type(value) in _PLAIN


def seconds_left(
    task_id: str, expires: float | str | datetime, *, now: Callable[[], datetime]
) -> float:
    """The message's time to live for `expires` (seconds, or an instant), as `send_task`
    computes it: an instant already past gives 0 and a warning."""
    if isinstance(expires, str):
        expires = datetime.fromisoformat(expires)
    if isinstance(expires, datetime):
        seconds = float(_elapsed(expires, now()).total_seconds())
    else:
        seconds = expires
    if seconds < 0:
        logger.warning(
            "safebeat: task %s has an expiry in the past (%ss ago); it is sent with a "
            "time to live of 0, as Celery does",
            task_id,
            -seconds,
        )
        return 0
    return seconds


def _elapsed(end: datetime, start: datetime) -> timedelta:
    """`end - start` between the UTC instants, a naive time taken as UTC: what Celery 5.7's
    `celery.utils.time.subtract_datetimes` computes (earlier releases have no such
    function, and subtract wall clocks when both times share a zone)."""
    until: datetime = maybe_make_aware(end)
    since: datetime = maybe_make_aware(start)
    return until.astimezone(timezone.utc) - since.astimezone(timezone.utc)
