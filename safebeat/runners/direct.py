"""Windows run by this process itself rather than published to Celery: claim, start, finish.

`safebeat exec` (a cron line, a Kubernetes CronJob) and the APScheduler executors run the
work where the claim was won. They record it on the window's dispatch row the way beat
and the worker hook do, so `safebeat status` and `safebeat history` show them beside
Celery entries:

1. `register` the entry's definition, so that `status` and `history` know it;
2. `claim` the window with `Store.write_windows` under the unique key (namespace, entry,
   window), with a reason (`exec`, `apscheduler`): no claim, no run;
3. `started`: the row is marked sent (the work is handed over, so `sent_at - window` is
   its lag, as for beat) and its execution started, naming the worker that runs it;
4. `finished`: the outcome and the runtime. Where the work could not even start (the
   command vanished after the claim), `not_started` marks the row failed with the error.

Every call may raise `StoreUnavailable` or `StoreError`; the callers decide what that means.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime, timedelta

from safebeat.facts import WindowRow
from safebeat.identity import current_replica, task_id_for
from safebeat.records import (
    Claim,
    Definition,
    DispatchRecord,
    LeasedRun,
    Registration,
    RunEnd,
    Start,
)
from safebeat.stores.administering import claims_of
from safebeat.stores.protocols import Store

#: A run recorded here renews no lease, so its lease lasts until it finishes: this process
#: runs the work itself, and no broker holds a copy that could take it over.
_UNTIL_FINISHED = timedelta(days=3650)


def digest(parts: Sequence[str]) -> str:
    """A digest of what an entry is (schedule, what it runs), the same in every process."""
    return hashlib.sha256(json.dumps(list(parts)).encode()).hexdigest()[:16]


def register(
    store: Store, namespace: str, entry: str, schedule: str, parts: Sequence[str]
) -> Registration:
    """Record the entry's definition (`schedule` is the text `status` shows)."""
    definition = Definition(entry, schedule, digest([schedule, *parts]))
    return store.register(namespace, [definition], current_replica())


def claim(
    store: Store, namespace: str, entry: str, window: datetime, *, reason: str, task_name: str
) -> Claim | None:
    """Claim `window` of `entry`; return the claim, or None if another process has it."""
    new = WindowRow(entry, window, reason, task_id_for(namespace, entry, window), task_name)
    claims = claims_of(store.write_windows(namespace, [new], replica=current_replica()))
    return claims[0] if claims else None


def started(store: Store, namespace: str, won: Claim, *, worker: str) -> Start:
    """Record that the claimed window is handed over and runs on `worker`."""
    store.record_publish(namespace, [won.id], {})
    return store.start_execution(namespace, _run(won, worker), lease=_UNTIL_FINISHED)


def finished(store: Store, namespace: str, won: Claim, *, worker: str, end: RunEnd) -> None:
    """Record how the run of a claimed window on `worker` ended."""
    store.finish_execution(namespace, _run(won, worker), end)


def _run(won: Claim, worker: str) -> LeasedRun:
    """The one run of a window claimed outside Celery (no retries)."""
    return LeasedRun(won.entry, won.window, worker, 0)


def not_started(store: Store, namespace: str, won: Claim, error: str) -> None:
    """Mark a claimed window failed: its work could not be started at all."""
    store.record_publish(namespace, [], {won.id: error})


def holder(store: Store, namespace: str, entry: str, window: datetime) -> DispatchRecord | None:
    """The dispatch row of `window` (who claimed it, how it went), if it is recent."""
    for record in store.history(namespace, entry, limit=20):
        if record.window == window:
            return record
    return None
