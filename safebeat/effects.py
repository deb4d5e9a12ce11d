"""`safebeat.claim(key)`: record a side effect once under a unique key, so a repeat skips it.

    report_date = safebeat.current_window().window.date()
    for client_id in clients:
        with safebeat.claim(("weekly-report", client_id, report_date)) as first:
            if first:
                send_report(client_id)

The key lives in the store named by `safebeat_url` (namespace `safebeat_namespace`),
under a unique constraint: of any number of processes claiming one key at once, exactly
one wins. Inside `with`, an exception releases the key again (`on_error="release"`, the
default), so a retry can redo that effect; `on_error="keep"` keeps it, for effects that
may have happened before the error. Keys expire after `keep_for` (default
`safebeat_retention`) and are pruned by beat. A store that cannot be reached raises
`StoreUnavailable`: claim() fails closed, since running the effect unguarded is what it
is there to prevent.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from types import TracebackType
from typing import Any, Literal

from celery import current_app, current_task

from safebeat.config import parse_duration
from safebeat.current import running_config
from safebeat.errors import SafebeatError
from safebeat.identity import format_window
from safebeat.stores.per_process import store_for, store_of
from safebeat.stores.protocols import EffectStore

logger = logging.getLogger("safebeat.effects")

#: Longest key text, so that keys fit every store's index.
MAX_KEY_LENGTH = 1000
KeyPart = str | int | date | uuid.UUID
OnError = Literal["release", "keep"]


class EffectClaim:
    """The answer of `claim()`: true if this call recorded the key; a context manager too.

    `with claim(key) as first:` gives that boolean, and releases the key again if the
    block raises (unless `on_error="keep"`).
    """

    def __init__(
        self,
        store: EffectStore,
        namespace: str,
        key: str,
        *,
        owner: str,
        claimed: bool,
        on_error: OnError,
    ) -> None:
        self.key = key
        self.claimed = claimed
        self._store = store
        self._namespace = namespace
        self._owner = owner
        self._on_error = on_error

    def __bool__(self) -> bool:
        return self.claimed

    def __repr__(self) -> str:
        return f"<EffectClaim {self.key!r} claimed={self.claimed}>"

    def __enter__(self) -> bool:
        return self.claimed

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None or not self.claimed or self._on_error == "keep":
            return
        try:
            self.release()
        except SafebeatError as error:
            logger.error(
                "safebeat: could not release effect key %r after %s (%s); it stays claimed "
                "and a retry will skip that effect",
                self.key,
                exc_type.__name__,
                error,
            )

    def release(self) -> bool:
        """Forget the key so that it can be claimed again; False if it was not ours."""
        if not self.claimed:
            return False
        released = self._store.release_effect(self._namespace, self.key, owner=self._owner)
        self.claimed = False
        return released


def claim(
    key: str | Sequence[KeyPart],
    *,
    keep_for: timedelta | float | str | None = None,
    on_error: OnError = "release",
    app: Any = None,
) -> EffectClaim:
    """Record the effect `key` once in the store; the answer is true for the first caller only.

    `key` is text, or a tuple of parts (text, whole numbers, dates, aware datetimes,
    UUIDs) such as `("weekly-report", client_id, report_date)`. `keep_for` is how long
    the key blocks a repeat (default `safebeat_retention`); after it, the key can be
    claimed again. `on_error` says what `with` does when its block raises: "release" the
    key so a retry can redo the effect, or "keep" it. `app` is the Celery app whose
    settings name the store (default: the running task's app; in a job run by an
    executor of `safebeat.contrib.apscheduler`, that executor's settings; else the
    current app).

    Raises `StoreUnavailable` when the store cannot be reached (the effect must not run
    unguarded: let the task fail or retry), ValueError or TypeError for a bad key.
    """
    if on_error not in ("release", "keep"):
        raise ValueError(f"claim(on_error={on_error!r}): expected 'release' or 'keep'")
    text = key_text(key)
    task = current_task._get_current_object()
    job_config = running_config() if app is None and task is None else None
    if job_config is not None:
        config, store = job_config, store_for(job_config)
    else:
        app = app or (task.app if task is not None else current_app._get_current_object())
        config, store = store_of(app)
    duration = config.retention if keep_for is None else parse_duration(keep_for, "keep_for")
    if duration <= timedelta(0):
        raise ValueError(f"claim(keep_for={keep_for!r}): must be greater than zero")
    owner = uuid.uuid4().hex
    task_id = getattr(getattr(task, "request", None), "id", None)
    claimed = store.claim_effect(
        config.namespace, text, owner=owner, keep_for=duration, task_id=task_id
    )
    return EffectClaim(
        store, config.namespace, text, owner=owner, claimed=claimed, on_error=on_error
    )


def key_text(key: str | Sequence[KeyPart]) -> str:
    """The stored text of a key: text as it is, a tuple of parts as a JSON array."""
    if isinstance(key, str):
        text = key
    elif isinstance(key, Sequence):
        text = json.dumps([_part(part, key) for part in key], separators=(",", ":"))
    else:
        raise TypeError(f"claim({key!r}): a key is text or a tuple of parts")
    if not key or not text.strip():
        raise ValueError(f"claim({key!r}): the key is empty")
    if len(text) > MAX_KEY_LENGTH:
        raise ValueError(
            f"claim(): key of {len(text)} characters; at most {MAX_KEY_LENGTH} (hash long parts)"
        )
    return text


def _part(part: object, key: object) -> str | int:
    if isinstance(part, bool) or not isinstance(part, str | int | date | uuid.UUID):
        raise TypeError(
            f"claim({key!r}): part {part!r} is a {type(part).__name__}; use text, whole "
            "numbers, dates, aware datetimes or UUIDs"
        )
    if isinstance(part, datetime):
        if part.tzinfo is None:
            raise TypeError(f"claim({key!r}): datetime {part!r} is naive; give it a time zone")
        return format_window(part)
    if isinstance(part, date):
        return part.isoformat()
    return str(part) if isinstance(part, uuid.UUID) else part
