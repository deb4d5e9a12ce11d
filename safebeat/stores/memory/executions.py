"""The memory store's execution records and effect keys (the worker hook, `safebeat.claim`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta

from safebeat.record_rules import lease_alive
from safebeat.records import LeasedRun, RunEnd
from safebeat.stores.executions import DecidedStart, ExecutionRow, start_columns
from safebeat.stores.memory.state import MemoryState, _Effect


class MemoryExecutions(DecidedStart, MemoryState):
    """`ExecutionStore` and `EffectStore` in memory."""

    @contextmanager
    def _execution_row(
        self, namespace: str, run: LeasedRun, *, exclusive: bool
    ) -> Iterator[ExecutionRow | None]:
        with self._mutex:
            ns, now, key = self._ns(namespace), self.clock(), (run.entry, run.window)
            record = ns.dispatches.get(key)
            if record is None or record.task_id is None:
                yield None
                return
            found = record

            def start(lease_until: datetime) -> None:
                started = start_columns(run, now, lease_until)
                ns.dispatches[key] = replace(found, **started, runs=found.runs + 1)

            def duplicate() -> None:
                ns.dispatches[key] = replace(found, duplicates=found.duplicates + 1)

            other_run_alive = exclusive and any(
                r.entry == run.entry
                and r.window != run.window
                and r.started_at is not None
                and r.finished_at is None
                and lease_alive(r.lease_until, now)
                for r in ns.dispatches.values()
            )
            yield ExecutionRow(
                now,
                found.started_at,
                found.finished_at,
                found.outcome,
                found.lease_until,
                found.retries,
                other_run_alive,
                start,
                duplicate,
            )

    def _renew_executions(self, namespace: str, runs: Sequence[LeasedRun], lease: timedelta) -> int:
        renewed = 0
        with self._mutex:
            ns, now = self._ns(namespace), self.clock()
            for run in runs:
                record = ns.dispatches.get((run.entry, run.window))
                if record is not None and run.holds(record):
                    ns.dispatches[(run.entry, run.window)] = replace(
                        record, lease_until=now + lease
                    )
                    renewed += 1
        return renewed

    def finish_execution(self, namespace: str, run: LeasedRun, end: RunEnd) -> None:
        with self._mutex:
            ns, now = self._ns(namespace), self.clock()
            record = ns.dispatches.get((run.entry, run.window))
            if record is None or not run.holds(record):
                return
            ns.dispatches[(run.entry, run.window)] = replace(
                record,
                finished_at=now,
                outcome=end.outcome,
                runtime=end.runtime,
                error=record.error if end.detail is None else end.detail,
            )

    def claim_effect(
        self, namespace: str, key: str, *, owner: str, keep_for: timedelta, task_id: str | None
    ) -> bool:
        with self._mutex:
            ns, now = self._ns(namespace), self.clock()
            effect = ns.effects.get(key)
            if effect is not None and effect.expires_at > now:
                return False
            ns.effects[key] = _Effect(owner, now + keep_for)
            return True

    def release_effect(self, namespace: str, key: str, *, owner: str) -> bool:
        with self._mutex:
            ns = self._ns(namespace)
            effect = ns.effects.get(key)
            if effect is None or effect.owner != owner:
                return False
            del ns.effects[key]
            return True
