"""How long a started run counts as running: its hard time limit, else `safebeat_overlap_timeout`;
and how long a queued window blocks the next under `skip_if_queued`.

Beat uses it for `overlap="forbid"` (a run older than this blocks nothing) and the
worker hook for duplicate deliveries (a run older than this, never finished, is presumed
lost and a new delivery of its window takes it over). Celery kills a task at its hard
time limit, so a run cannot last longer than that; without a limit, the setting decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from safebeat.config import Config
from safebeat.entries import Entry
from safebeat.windows import Overlap


def running_timeout(config: Config, *time_limits: object) -> timedelta:
    """Return the first positive hard time limit (seconds) in `time_limits`, else the setting.

    Pass the candidates most specific first: the message's or entry's `time_limit`, the
    task's `time_limit`, the app's `task_time_limit`. None and non-numbers are passed over.
    """
    for limit in time_limits:
        if isinstance(limit, int | float) and not isinstance(limit, bool) and limit > 0:
            return timedelta(seconds=float(limit))
    return config.overlap_timeout


def overlap_timeouts(
    app: Any, config: Config, entries: Mapping[str, Entry]
) -> dict[str, timedelta]:
    """How long the previous window blocks the next, for each entry with an overlap rule.

    `forbid`: how long a started run counts as running: the entry's `time_limit` option,
    else its task's, else the app's, else the setting. `skip_if_queued`: how long a window
    waits in the queue before it is presumed lost: the entry's `expires` option (seconds;
    the worker drops the message after it), else the setting.
    """
    timeouts: dict[str, timedelta] = {}
    for name, entry in entries.items():
        if entry.overlap is Overlap.SKIP_IF_QUEUED:
            timeouts[name] = running_timeout(config, entry.options.get("expires"))
        elif entry.overlap is Overlap.FORBID:
            task = app.tasks.get(entry.task)
            timeouts[name] = running_timeout(
                config,
                entry.options.get("time_limit"),
                getattr(task, "time_limit", None),
                app.conf.task_time_limit,
            )
    return timeouts
