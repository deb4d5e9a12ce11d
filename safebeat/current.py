"""Which scheduled window the running task belongs to, read from the headers safebeat sends."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from celery import current_task

from safebeat.identity import parse_window
from safebeat.publishing import ENTRY_HEADER, WINDOW_HEADER

logger = logging.getLogger("safebeat.worker")


@dataclass(frozen=True)
class CurrentWindow:
    """The schedule entry and window (an aware UTC datetime) a task was sent for."""

    entry: str
    window: datetime


def current_window() -> CurrentWindow | None:
    """Return the window of the task running in this thread, or None if safebeat did not send it.

    Works in a worker with any pool, and in eager calls such as `task.apply(headers=...)`.
    Derive dates from `window`, never from "today": a run that is re-published or delayed
    past midnight still belongs to the window it was scheduled for.
    """
    request = getattr(current_task, "request", None)
    return None if request is None else window_of(request)


def window_of(request: Any) -> CurrentWindow | None:
    """Return the window a Celery request (`task.request`) carries, or None."""
    headers = getattr(request, "headers", None)
    headers = headers if isinstance(headers, Mapping) else {}
    entry = headers.get(ENTRY_HEADER, getattr(request, ENTRY_HEADER, None))
    window = headers.get(WINDOW_HEADER, getattr(request, WINDOW_HEADER, None))
    if not isinstance(entry, str) or not isinstance(window, str):
        return None
    try:
        return CurrentWindow(entry, parse_window(window))
    except ValueError:
        logger.warning(
            "safebeat: task %s has a malformed %s header %r; treating it as not sent by safebeat",
            getattr(request, "id", "?"),
            WINDOW_HEADER,
            window,
        )
        return None
