"""The worker hook's side of a store written once: `ExecutionAdapter` states
`start_execution` and `renew_executions` over one hook each, and `DecidedStart` is
`start_execution` for the stores that decide it in Python.

The rule is `record_rules.decide_start`; the flow around it is here: under the window's row
lock, no dispatched row means UNKNOWN, a duplicate is counted, a run or a takeover is
recorded as started with a new lease, a deferred delivery writes nothing. The memory,
SQLite and Django ORM stores give `DecidedStart` the row (`_execution_row`); PostgreSQL
and Redis decide inside the server in one round trip by the same rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from safebeat.record_rules import decide_start
from safebeat.records import LeasedRun, Outcome, Start


@dataclass(frozen=True)
class ExecutionRow:
    """A dispatched window's execution columns, read under its row's lock at store `now`.

    `outcome` is the one its run recorded at its end (None: none yet, or not one this
    version knows). `other_run_alive`: another window of the entry has an unfinished run with a live
    lease (only looked up when the caller asked for it: `overlap="forbid"`).
    `start(lease_until)` records the start of the run asked about (started_at = now, its
    worker and retries, the lease, finished_at, outcome and runtime cleared, runs + 1);
    `duplicate()` adds one to its duplicates.
    """

    now: datetime
    started_at: datetime | None
    finished_at: datetime | None
    outcome: Outcome | None
    lease_until: datetime | None
    retries: int | None
    other_run_alive: bool
    start: Callable[[datetime], object]
    duplicate: Callable[[], object]


def outcome_of(value: object) -> Outcome | None:
    """The outcome a row holds as text (the SQL stores, Redis, the ORM), or None: none
    recorded, or one this version does not know (read as a final end, never a retry)."""
    try:
        return None if value is None else Outcome(value)
    except ValueError:
        return None


def start_columns(run: LeasedRun, now: datetime, lease_until: datetime) -> dict[str, Any]:
    """The columns that record the start of `run` at store `now` (`runs` grows by one
    beside them, as each backend counts)."""
    return {
        "started_at": now,
        "lease_until": lease_until,
        "worker": run.worker,
        "retries": run.retries,
        "finished_at": None,
        "outcome": None,
        "runtime": None,
    }


class _ExecutionHooks(Protocol):
    def _start_execution(
        self, namespace: str, run: LeasedRun, lease: timedelta, exclusive: bool
    ) -> Start:
        """Decide and record the start of `run` (see `ExecutionStore.start_execution`)."""
        ...

    def _renew_executions(self, namespace: str, runs: Sequence[LeasedRun], lease: timedelta) -> int:
        """Extend the leases of `runs` (never empty) that still hold their rows."""
        ...


class ExecutionAdapter:
    """`ExecutionStore.start_execution` and `renew_executions` (see `stores/protocols.py`) for a
    store that provides `_start_execution` and `_renew_executions`."""

    def start_execution(
        self: _ExecutionHooks,
        namespace: str,
        run: LeasedRun,
        *,
        lease: timedelta,
        exclusive: bool = False,
    ) -> Start:
        return self._start_execution(namespace, run, lease, exclusive)

    def renew_executions(
        self: _ExecutionHooks, namespace: str, runs: Sequence[LeasedRun], *, lease: timedelta
    ) -> int:
        return self._renew_executions(namespace, runs, lease) if runs else 0


class _LocksExecutionRows(Protocol):
    def _execution_row(
        self, namespace: str, run: LeasedRun, *, exclusive: bool
    ) -> AbstractContextManager[ExecutionRow | None]:
        """Lock the dispatch row of (namespace, run's entry and window) that carries a task
        id and yield it (None: there is none) inside a transaction committed at the end;
        with `exclusive`, look up whether another window of the entry runs with a live
        lease."""
        ...


class DecidedStart(ExecutionAdapter):
    """`start_execution` decided in Python, for a store that provides `_execution_row`."""

    def _start_execution(
        self: _LocksExecutionRows, namespace: str, run: LeasedRun, lease: timedelta, exclusive: bool
    ) -> Start:
        with self._execution_row(namespace, run, exclusive=exclusive) as row:
            if row is None:
                return Start.UNKNOWN
            verdict = decide_start(
                started_at=row.started_at,
                finished_at=row.finished_at,
                outcome=row.outcome,
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
