"""`start_execution` written once for the stores that decide it in Python.

The rule is `records.decide_start`; the flow around it is here: under the window's row
lock, no dispatched row means UNKNOWN, a duplicate is counted, a run or a takeover is
recorded as started with a new lease, a deferred delivery writes nothing. The memory,
SQLite and Django ORM stores give `DecidedStart` the row (`_execution_row`); PostgreSQL
and Redis decide inside the server in one round trip by the same rule.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from safebeat.records import LeasedRun, Start, decide_start


@dataclass(frozen=True)
class ExecutionRow:
    """A dispatched window's execution columns, read under its row's lock at store `now`.

    `other_run_alive`: another window of the entry has an unfinished run with a live
    lease (only looked up when the caller asked for it: `overlap="forbid"`).
    `start(lease_until)` records the start of the run asked about (started_at = now, its
    worker and retries, the lease, finished_at, outcome and runtime cleared, runs + 1);
    `duplicate()` adds one to its duplicates.
    """

    now: datetime
    started_at: datetime | None
    finished_at: datetime | None
    lease_until: datetime | None
    retries: int | None
    other_run_alive: bool
    start: Callable[[datetime], object]
    duplicate: Callable[[], object]


class _LocksExecutionRows(Protocol):
    def _execution_row(
        self, namespace: str, run: LeasedRun, *, exclusive: bool
    ) -> AbstractContextManager[ExecutionRow | None]:
        """Lock the dispatch row of (namespace, run's entry and window) that carries a task
        id and yield it (None: there is none) inside a transaction committed at the end;
        with `exclusive`, look up whether another window of the entry runs with a live
        lease."""
        ...


class DecidedStart:
    """`ExecutionStore.start_execution` for a store that provides `_execution_row`."""

    def start_execution(
        self: _LocksExecutionRows,
        namespace: str,
        run: LeasedRun,
        *,
        lease: timedelta,
        exclusive: bool = False,
    ) -> Start:
        with self._execution_row(namespace, run, exclusive=exclusive) as row:
            if row is None:
                return Start.UNKNOWN
            verdict = decide_start(
                started_at=row.started_at,
                finished_at=row.finished_at,
                lease_until=row.lease_until,
                recorded_retries=row.retries,
                retries=run.retries,
                now=row.now,
                other_run_alive=row.other_run_alive,
            )
            if verdict is Start.DUPLICATE:
                row.duplicate()
            elif verdict is not Start.DEFER:
                row.start(row.now + lease)
            return verdict
