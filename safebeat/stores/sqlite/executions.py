"""The SQLite store's execution records and effect keys (the worker hook, `safebeat.claim`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta

from safebeat.records import LeasedRun, RunEnd
from safebeat.stores.executions import DecidedStart, ExecutionRow, outcome_of
from safebeat.stores.sqlite.connection import (
    Q,
    SqliteConnection,
    _maybe_instant,
    _us,
)


class SqliteExecutions(DecidedStart, SqliteConnection):
    """`ExecutionStore` and `EffectStore` on SQLite."""

    @contextmanager
    def _execution_row(
        self, namespace: str, run: LeasedRun, *, exclusive: bool
    ) -> Iterator[ExecutionRow | None]:
        with self._write("record the start of an execution") as conn:
            now = self.clock()
            key = {
                "namespace": namespace,
                "entry": run.entry,
                "window": _us(run.window),
                "exclusive": exclusive,
                "now": _us(now),
            }
            row = conn.execute(Q["execution_of"], key).fetchone()
            if row is None:
                yield None
                return
            row_id, started_at, finished_at, outcome, lease_until, retries, other_alive = row
            yield ExecutionRow(
                now,
                _maybe_instant(started_at),
                _maybe_instant(finished_at),
                outcome_of(outcome),
                _maybe_instant(lease_until),
                retries,
                bool(other_alive),
                start=lambda lease_until: conn.execute(
                    Q["start_execution"],
                    {
                        "id": row_id,
                        "now": _us(now),
                        "lease_until": _us(lease_until),
                        "worker": run.worker,
                        "retries": run.retries,
                    },
                ),
                duplicate=lambda: conn.execute(Q["count_duplicate"], {"id": row_id}),
            )

    def _renew_executions(self, namespace: str, runs: Sequence[LeasedRun], lease: timedelta) -> int:
        with self._write("renew execution leases") as conn:
            lease_until = _us(self.clock() + lease)
            return sum(
                conn.execute(
                    Q["renew_execution"], {**_run_key(namespace, run), "lease_until": lease_until}
                ).rowcount
                for run in runs
            )

    def finish_execution(self, namespace: str, run: LeasedRun, end: RunEnd) -> None:
        with self._write("record the end of an execution") as conn:
            conn.execute(
                Q["finish_execution"],
                {
                    **_run_key(namespace, run),
                    "outcome": end.outcome.value,
                    "runtime": end.runtime // timedelta(microseconds=1),
                    "detail": end.detail,
                    "now": _us(self.clock()),
                },
            )

    def claim_effect(
        self, namespace: str, key: str, *, owner: str, keep_for: timedelta, task_id: str | None
    ) -> bool:
        with self._write("claim an effect key") as conn:
            now = self.clock()
            row = conn.execute(
                Q["claim_effect"],
                {
                    "namespace": namespace,
                    "key": key,
                    "owner": owner,
                    "task_id": task_id,
                    "now": _us(now),
                    "expires_at": _us(now + keep_for),
                },
            ).fetchone()
        return row is not None

    def release_effect(self, namespace: str, key: str, *, owner: str) -> bool:
        with self._write("release an effect key") as conn:
            deleted = conn.execute(
                Q["release_effect"], {"namespace": namespace, "key": key, "owner": owner}
            ).rowcount
        return bool(deleted)


def _run_key(namespace: str, run: LeasedRun) -> dict[str, object]:
    """The parameters that find `run`'s row while it still holds it (`LeasedRun.holds`)."""
    return {
        "namespace": namespace,
        "entry": run.entry,
        "window": _us(run.window),
        "worker": run.worker,
        "retries": run.retries,
    }
