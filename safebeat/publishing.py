"""Turning a claimed window into a Celery message: the task id, the headers, the options."""

from __future__ import annotations

from typing import Any

from celery.beat import BeatLazyFunc

from safebeat.entries import Entry
from safebeat.identity import format_window
from safebeat.stores.base import Claim

#: Message headers safebeat adds to every task it sends.
ENTRY_HEADER = "safebeat_entry"
WINDOW_HEADER = "safebeat_window"
PERIODIC_TASK_HEADER = "periodic_task_name"


def message_for(entry: Entry, claim: Claim) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """Return (args, kwargs, options) for `send_task`/`apply_async` of one claimed window.

    The task id is the claim's deterministic id, so a re-publish carries the same id.
    Lazy arguments (`celery.beat.BeatLazyFunc`) are evaluated now, as stock beat does.
    """
    args = [_evaluate(value) for value in entry.args]
    kwargs = {key: _evaluate(value) for key, value in entry.kwargs.items()}
    options = dict(entry.options)
    headers: dict[str, Any] = dict(options.pop("headers", None) or {})
    headers.update(
        {
            ENTRY_HEADER: entry.name,
            WINDOW_HEADER: format_window(claim.window),
            PERIODIC_TASK_HEADER: entry.name,
            # Stock beat marks its messages this way; tools that look for it keep working.
            "celery_beat_task": True,
        }
    )
    options["headers"] = headers
    options["task_id"] = claim.task_id
    return args, kwargs, options


def _evaluate(value: object) -> object:
    return value() if isinstance(value, BeatLazyFunc) else value


def send(app: Any, producer: Any, entry: Entry, claim: Claim) -> None:
    """Publish one window, through the task's own `apply_async` when this process knows it."""
    args, kwargs, options = message_for(entry, claim)
    task = app.tasks.get(entry.task)
    if task is not None:
        task.apply_async(args, kwargs, producer=producer, **options)
    else:
        app.send_task(entry.task, args, kwargs, producer=producer, **options)
