"""The memory store's execution records and effect keys (the worker hook, `safebeat.claim`)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from safebeat.records import (
    Outcome,
    Start,
    decide_start,
)
from safebeat.stores.memory.state import MemoryState, _Effect


class MemoryExecutions(MemoryState):
    """`ExecutionStore` and `EffectStore` in memory."""

    def start_execution(
        self,
        namespace: str,
        entry: str,
        window: datetime,
        *,
        worker: str,
        retries: int,
        stale_after: timedelta,
    ) -> Start:
        with self._mutex:
            ns, now = self._ns(namespace), self.clock()
            record = ns.dispatches.get((entry, window))
            if record is None or record.task_id is None:
                return Start.UNKNOWN
            verdict = decide_start(
                started_at=record.started_at,
                finished_at=record.finished_at,
                recorded_retries=record.retries,
                retries=retries,
                now=now,
                stale_after=stale_after,
            )
            if verdict is Start.DUPLICATE:
                ns.dispatches[(entry, window)] = replace(record, duplicates=record.duplicates + 1)
                return Start.DUPLICATE
            ns.dispatches[(entry, window)] = replace(
                record,
                started_at=now,
                worker=worker,
                retries=retries,
                finished_at=None,
                outcome=None,
                runtime=None,
                runs=record.runs + 1,
            )
            return verdict

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
