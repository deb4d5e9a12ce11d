"""The PostgreSQL statements of the worker hook and `safebeat.claim`: executions, effect keys.

Each decides inside the server in one statement (`start_execution` by the rule of
`record_rules.decide_start`); the start of an `overlap="forbid"` entry's window also takes the
entry's start lock. The worker's three (start, renew, finish) each run in a transaction
the cursor source opens and bounds as it bounds a tick (`lock_timeout`,
`statement_timeout`): a renewal queued behind a row lock fails after the lock timeout and
is retried at the next round, instead of waiting while the run's lease lapses.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from safebeat.records import LeasedRun, RunEnd, Start
from safebeat.stores.executions import ExecutionAdapter
from safebeat.stores.postgres.cursors import Q, Statements
from safebeat.stores.sql_common import advisory_key


class ExecutionStatements(ExecutionAdapter, Statements):
    """`ExecutionStore` and `EffectStore` on PostgreSQL."""

    def _start_execution(
        self, namespace: str, run: LeasedRun, lease: timedelta, exclusive: bool
    ) -> Start:
        with self._cursors.transaction("record the start of an execution") as cursor:
            if exclusive:
                # Starts of one forbid entry queue here, so two windows starting at once
                # each see the other's start (one statement's snapshot would not).
                cursor.execute(
                    Q["lock_entry_starts"], {"key": advisory_key("start", namespace, run.entry)}
                )
            cursor.execute(
                Q["start_execution"],
                {**_run_key(namespace, run), "lease": lease, "exclusive": exclusive},
            )
            row = cursor.fetchone()
            return Start.UNKNOWN if row is None else Start(row[0])

    def _renew_executions(self, namespace: str, runs: Sequence[LeasedRun], lease: timedelta) -> int:
        with self._cursors.transaction("renew execution leases") as cursor:
            cursor.execute(
                Q["renew_executions"],
                {
                    "namespace": namespace,
                    "lease": lease,
                    "entries": [r.entry for r in runs],
                    "windows": [r.window for r in runs],
                    "workers": [r.worker for r in runs],
                    "retries": [r.retries for r in runs],
                },
            )
            return cursor.rowcount

    def finish_execution(self, namespace: str, run: LeasedRun, end: RunEnd) -> None:
        with self._cursors.transaction("record the end of an execution") as cursor:
            cursor.execute(
                Q["finish_execution"],
                {
                    **_run_key(namespace, run),
                    "outcome": end.outcome.value,
                    "runtime": end.runtime,
                    "detail": end.detail,
                },
            )

    def claim_effect(
        self,
        namespace: str,
        key: str,
        *,
        owner: str,
        keep_for: timedelta,
        task_id: str | None,
    ) -> bool:
        with self._cursors.statement("claim an effect key") as cursor:
            cursor.execute(
                Q["claim_effect"],
                {
                    "namespace": namespace,
                    "key": key,
                    "owner": owner,
                    "task_id": task_id,
                    "keep_for": keep_for,
                },
            )
            return cursor.fetchone() is not None

    def release_effect(self, namespace: str, key: str, *, owner: str) -> bool:
        with self._cursors.statement("release an effect key") as cursor:
            cursor.execute(
                Q["release_effect"], {"namespace": namespace, "key": key, "owner": owner}
            )
            return bool(cursor.rowcount)


def _run_key(namespace: str, run: LeasedRun) -> dict[str, Any]:
    """The parameters that name `run`: its window's row, its worker and retries."""
    return {
        "namespace": namespace,
        "entry": run.entry,
        "window": run.window,
        "worker": run.worker,
        "retries": run.retries,
    }
