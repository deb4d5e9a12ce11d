"""The facts a store reads about an entry's dispatch rows, for the rules above the store,
and the one shape of row it writes for them outside a tick.

A store loads the facts as they are, each with a bounded index probe, and decides nothing
from them: what an overlap policy makes of them (`running_since`, `queued_since`, or
whatever a new policy needs) is derived in `safebeat.windows.overlap`. What the operator
tools and the direct runner record (a trigger, a backfill, a run here, a window passed
over) is a `WindowRow`, claimed or skipped with its reason, written by
`AdminStore.write_windows`. A new policy reads these facts and touches no store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Dispatched:
    """An entry's newest dispatched window: of its rows claimed or sent, the one of the
    latest window, however many skipped or failed rows came after it.

    `claimed_at` is when a replica claimed it, `started_at` when a worker first started it
    (None: no worker has yet).
    """

    window: datetime
    claimed_at: datetime
    started_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class LiveRun:
    """An entry's newest run that holds a live lease: started, not finished, its
    `lease_until` after the store's clock when the state was read (see
    `Store.start_execution`). `task_id` is the Celery task id of its window."""

    window: datetime
    started_at: datetime
    lease_until: datetime
    task_id: str | None = None


@dataclass(frozen=True, slots=True)
class WindowRow:
    """A window written outside the schedule's tick: claimed for the task `task_id` (named
    `task_name`), or skipped when `task_id` is None; `reason` says why either way (`trigger`,
    `backfill`, `exec`, ...)."""

    entry: str
    window: datetime
    reason: str
    task_id: str | None = None
    task_name: str | None = None


@dataclass(frozen=True, slots=True)
class WrittenRow:
    """A `WindowRow` a store wrote, with the id of its row."""

    id: int
    row: WindowRow
