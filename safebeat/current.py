"""Which scheduled window the running code belongs to: a Celery task, an APScheduler job,
or a command started by `safebeat exec`.

A task sent by beat carries its window in the headers safebeat sends. A job run by
`safebeat.contrib.apscheduler`'s executors gets it from a context variable the executor
sets around the job. A command run by `safebeat exec` gets it in its environment
(`SAFEBEAT_ENTRY`, `SAFEBEAT_WINDOW`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import date, datetime, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery import current_task

from safebeat.config import Config
from safebeat.identity import ENTRY_HEADER, TIMEZONE_HEADER, WINDOW_HEADER, parse_window

logger = logging.getLogger("safebeat.worker")

#: The environment variables `safebeat exec` gives its command: the entry and the window
#: (ISO 8601 UTC, like the `safebeat_window` header).
ENTRY_VARIABLE = "SAFEBEAT_ENTRY"
WINDOW_VARIABLE = "SAFEBEAT_WINDOW"


@dataclass(frozen=True)
class CurrentWindow:
    """The schedule entry and window (an aware UTC datetime) a task was sent for, and the
    zone the entry's schedule speaks (`zone`: its `timezone` option, else the app's)."""

    entry: str
    window: datetime
    zone: tzinfo = timezone.utc

    @property
    def local(self) -> datetime:
        """The window in the entry's zone: `2026-03-01 00:30+01:00` for a Berlin entry
        whose window is `2026-02-28T23:30:00Z`."""
        return self.window.astimezone(self.zone)

    @property
    def local_date(self) -> date:
        """The day the window belongs to where the schedule runs: the date to key a daily
        report or a billing day on (`window.date()` is the UTC date)."""
        return self.local.date()


@dataclass(frozen=True)
class _Running:
    window: CurrentWindow
    config: Config | None


_running: ContextVar[_Running | None] = ContextVar("safebeat_running_window", default=None)


def current_window() -> CurrentWindow | None:
    """Return the window of the task or job running in this thread, or None if safebeat
    did not start it.

    Works in a worker with any pool, in eager calls such as `task.apply(headers=...)`, in
    jobs run by the APScheduler executors of `safebeat.contrib.apscheduler`, and in
    commands run by `safebeat exec`. Derive dates from `window`, never from "today": a
    run that is re-published or delayed past midnight still belongs to the window it
    was scheduled for.
    """
    request = getattr(current_task, "request", None)
    found = None if request is None else window_of(request, _app_zone())
    if found is not None:
        return found
    running = _running.get()
    if running is not None:
        return running.window
    return window_from_environment(os.environ)


@contextmanager
def running(window: CurrentWindow, config: Config | None = None) -> Iterator[None]:
    """Make `current_window()` return `window` in this context until the block ends, and
    `safebeat.claim()` use the store `config` names (for code outside a Celery task)."""
    token = _running.set(_Running(window, config))
    try:
        yield
    finally:
        _running.reset(token)


def running_config() -> Config | None:
    """The settings of the job running in this context (see `running`), if any."""
    running_now = _running.get()
    return None if running_now is None else running_now.config


def window_of(request: Any, default_zone: tzinfo = timezone.utc) -> CurrentWindow | None:
    """Return the window a Celery request (`task.request`) carries, or None.

    Its zone is the `safebeat_timezone` header's; a message without one (an entry in UTC,
    or sent by a safebeat before 0.2) gets `default_zone`."""
    headers = getattr(request, "headers", None)
    headers = headers if isinstance(headers, Mapping) else {}
    entry = headers.get(ENTRY_HEADER, getattr(request, ENTRY_HEADER, None))
    window = headers.get(WINDOW_HEADER, getattr(request, WINDOW_HEADER, None))
    if not isinstance(entry, str) or not isinstance(window, str):
        return None
    zone = _zone(headers.get(TIMEZONE_HEADER, getattr(request, TIMEZONE_HEADER, None)))
    try:
        return CurrentWindow(entry, parse_window(window), zone or default_zone)
    except ValueError:
        logger.warning(
            "safebeat: task %s has a malformed %s header %r; treating it as not sent by safebeat",
            getattr(request, "id", "?"),
            WINDOW_HEADER,
            window,
        )
        return None


def window_from_environment(environ: Mapping[str, str]) -> CurrentWindow | None:
    """Return the window `safebeat exec` gave this process in its environment, or None."""
    entry, window = environ.get(ENTRY_VARIABLE), environ.get(WINDOW_VARIABLE)
    if not entry or not window:
        return None
    try:
        return CurrentWindow(entry, parse_window(window))
    except ValueError:
        logger.warning(
            "safebeat: %s=%r is not an ISO 8601 instant; treating this process as not "
            "started by safebeat exec",
            WINDOW_VARIABLE,
            window,
        )
        return None


def _zone(name: object) -> tzinfo | None:
    """The zone a `safebeat_timezone` header names, or None for none or an unknown name."""
    if not isinstance(name, str) or not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        logger.warning("safebeat: unknown time zone %r in a task's headers; using UTC", name)
        return None


def _app_zone() -> tzinfo:
    """The running task's app's zone, for a message that names none (or UTC)."""
    zone = getattr(getattr(current_task, "app", None), "timezone", None)
    if not isinstance(zone, tzinfo) or getattr(zone, "key", None) in ("UTC", "Etc/UTC"):
        return timezone.utc  # one UTC, so windows compare equal whichever way they came
    return zone
