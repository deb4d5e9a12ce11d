"""The memory store's execution records and effect keys (the worker hook, `safebeat.claim`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta

from safebeat.records import (
    Outcome,
)
from safebeat.stores.executions import DecidedStart, ExecutionRow
from safebeat.stores.memory.state import MemoryState, _Effect


class MemoryExecutions(DecidedStart, MemoryState):
    """`ExecutionStore` and `EffectStore` in memory."""

    @contextmanager
    def _execution_row(
        self, namespace: str, entry: str, window: datetime
    ) -> Iterator[ExecutionRow | None]:
        with self._mutex:
            ns, now, key = self._ns(namespace), self.clock(), (entry, window)
            record = ns.dispatches.get(key)
            if record is None or record.task_id is None:
                yield None
                return
            found = record

            def start(worker: str, retries: int) -> None:
                ns.dispatches[key] = replace(
                    found,
                    started_at=now,
                    worker=worker,
                    retries=retries,
                    finished_at=None,
                    outcome=None,
                    runtime=None,
                    runs=found.runs + 1,
                )

            def duplicate() -> None:
                ns.dispatches[key] = replace(found, duplicates=found.duplicates + 1)

            yield ExecutionRow(
                now, found.started_at, found.finished_at, found.retries, start, duplicate
            )

    def finish_execution(
        self,
        namespace: str,
        entry: str,
        window: datetime,
        *,
        worker: str,
        retries: int,
        outcome: Outcome,
        runtime: timedelta,
        detail: str | None = None,
    ) -> None:
        with self._mutex:
            ns, now = self._ns(namespace), self.clock()
            record = ns.dispatches.get((entry, window))
            if (
                record is None
                or record.worker != worker
                or record.retries != retries
                or record.finished_at is not None
            ):
                return
            ns.dispatches[(entry, window)] = replace(
                record,
                finished_at=now,
                outcome=outcome,
                runtime=runtime,
                error=record.error if detail is None else detail,
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
