"""The Redis store's execution records and effect keys (the worker hook, `safebeat.claim`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from safebeat.records import LeasedRun, RunEnd, Start
from safebeat.stores.redis.base import RedisBase, _claim_key, _micros, key_prefix


class RedisExecutions(RedisBase):
    """`ExecutionStore` and `EffectStore` on Redis, one script each."""

    def start_execution(
        self, namespace: str, run: LeasedRun, *, lease: timedelta, exclusive: bool = False
    ) -> Start:
        prefix = key_prefix(namespace)
        with self._boundary("record an execution's start"):
            verdict = self._run(
                "start_execution",
                [_claim_key(prefix, run.entry, run.window)],
                [prefix, run.entry, run.worker, run.retries, _micros(lease), int(exclusive)],
            )
        return Start(verdict)

    def renew_executions(
        self, namespace: str, runs: Sequence[LeasedRun], *, lease: timedelta
    ) -> int:
        if not runs:
            return 0
        prefix = key_prefix(namespace)
        args: list[object] = [prefix, _micros(lease)]
        for run in runs:
            args += [run.entry, _claim_key(prefix, run.entry, run.window), run.worker, run.retries]
        with self._boundary("renew execution leases"):
            return int(self._run("renew_executions", [f"{prefix}:seq"], args))

    def finish_execution(self, namespace: str, run: LeasedRun, end: RunEnd) -> None:
        prefix = key_prefix(namespace)
        with self._boundary("record an execution's end"):
            self._run(
                "finish_execution",
                [_claim_key(prefix, run.entry, run.window)],
                [
                    prefix,
                    run.entry,
                    run.worker,
                    run.retries,
                    end.outcome.value,
                    _micros(end.runtime),
                    end.detail or "",
                ],
            )

    def claim_effect(
        self, namespace: str, key: str, *, owner: str, keep_for: timedelta, task_id: str | None
    ) -> bool:
        prefix = key_prefix(namespace)
        with self._boundary("claim an effect key"):
            recorded = self._run(
                "claim_effect",
                [f"{prefix}:effect:{key}"],
                [prefix, owner, _micros(keep_for), task_id or ""],
            )
        return bool(recorded)

    def release_effect(self, namespace: str, key: str, *, owner: str) -> bool:
        prefix = key_prefix(namespace)
        with self._boundary("release an effect key"):
            released = self._run("release_effect", [f"{prefix}:effect:{key}"], [prefix, owner])
        return bool(released)
