"""One claim round of beat: the store's tick run with the planner, a tick the store ended for
outlasting `safebeat_lock_timeout` turned into `TickTooLong` (and a smaller batch next time),
a result that lacks its plan made safe, each planned entry paced to its next window; then
the claims published through the dispatcher, and counted."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from safebeat.batching import ClaimBatch
from safebeat.dispatch import Dispatcher
from safebeat.entries import Entry
from safebeat.errors import StoreUnavailable, TickTooLong
from safebeat.identity import Replica
from safebeat.metrics import BeatMetrics
from safebeat.pacing import Pacing
from safebeat.planning import Planned
from safebeat.records import Claim, EntryState, Reclaim, TickResult
from safebeat.reporting import report_dispatch, report_plan
from safebeat.stores import Store

logger = logging.getLogger("safebeat.scheduler")

Planner = Callable[[datetime, Mapping[str, EntryState]], Planned]


class ClaimRounds:
    """Beat's claim rounds in one store namespace, and the batch of due entries a round
    claims: halved after a round the store ended for lasting too long, grown back after
    quick ones (see `safebeat.batching`)."""

    def __init__(
        self,
        store: Callable[[], Store],
        namespace: str,
        replica: Replica,
        *,
        batch: ClaimBatch,
        pacing: Pacing,
        metrics: BeatMetrics,
        monotonic: Callable[[], float],
    ) -> None:
        self._store, self._namespace, self._replica = store, namespace, replica
        self._pacing, self._metrics, self._monotonic = pacing, metrics, monotonic
        self.batch = batch

    def batch_size(self, ceiling: int, floor: int) -> int:
        """How many due entries the next round claims, at most `ceiling` (a scheduler may
        set another `claim_batch` after it started: the batch starts again from it)."""
        if self.batch.ceiling != ceiling:
            self.batch = ClaimBatch(ceiling, floor)
        return self.batch.size

    def run(
        self,
        due: Sequence[str],
        planner: Planner,
        *,
        reclaim: Reclaim | None,
        lock_timeout: timedelta,
        started: float,
        retry_after: timedelta,
    ) -> TickResult | None:
        """Run one store tick for `due` (begun at monotonic `started`); None if another
        replica holds the tick lock. Each of `due` is paced to the next window it planned."""
        store, limit = self._store(), lock_timeout.total_seconds()
        planned_once = False

        def planning(now: datetime, states: Mapping[str, EntryState]) -> Planned:
            nonlocal planned_once
            planned_once = True
            return planner(now, states)

        try:
            result = store.tick(
                self._namespace, due, planning, replica=self._replica, reclaim=reclaim
            )
        except StoreUnavailable as exc:
            # The store answered the tick's first message (it ran our planner) and the tick
            # failed after the lock timeout: the store ended it for lasting too long.
            took = self._monotonic() - started
            if isinstance(exc, TickTooLong) or (planned_once and took >= limit):
                size = self.batch.too_long()
                raise TickTooLong(
                    f"tick took longer than safebeat_lock_timeout ({limit:g}s): "
                    f"{len(due)} entries in {took:.1f}s, and the store ended it, writing "
                    f"nothing; claiming fewer entries per tick ({size}) [{exc}]"
                ) from exc
            raise
        if result is None:
            return None
        self.batch.finished(seconds=self._monotonic() - started, lock_timeout=limit)
        planned = _plan_of(result, due, store.display_url, retry_after)
        report_plan(planned, self._metrics)
        for name in due:
            upcoming = planned.upcoming.get(name, result.now)
            self._pacing.schedule_next(name, upcoming, result.now, started)
        if reclaim is not None:
            self._pacing.reclaimed(started, reclaim.timeout)
        return result


def _plan_of(
    result: TickResult, due: Sequence[str], store_url: str, retry_after: timedelta
) -> Planned:
    """The plan in `result`; from a store outside the contract, which returned none, a plan
    that looks at `due` again after `retry_after` (never spin)."""
    if isinstance(result.plan, Planned):
        return result.plan
    logger.error(
        "safebeat: store %s returned a tick result without the plan its planner made "
        "(TickResult.plan, see safebeat.stores.base.TickStore.tick); its entries are "
        "looked at every %.0fs instead",
        store_url,
        retry_after.total_seconds(),
    )
    return Planned(upcoming=dict.fromkeys(due, result.now + retry_after))


def publish_claims(
    dispatcher: Dispatcher,
    store: Store,
    namespace: str,
    claims: Sequence[Claim],
    *,
    entries: Mapping[str, Entry],
    connection: Any,
    producer: Callable[[], Any],
    claimed_at: float,
    store_now: datetime | None,
    metrics: BeatMetrics,
    monotonic: Callable[[], float],
) -> Sequence[Claim]:
    """Publish claimed windows (claimed at monotonic `claimed_at`, store time `store_now`)
    through the dispatcher; count and log what happened; return the claims sent."""
    dispatched = dispatcher.dispatch(
        store,
        namespace,
        claims,
        entries=entries,
        connection=connection,
        producer=producer,
        claimed_at=claimed_at,
    )
    now = monotonic()
    report_dispatch(
        dispatched,
        metrics,
        published_at=None if store_now is None else store_now + timedelta(seconds=now - claimed_at),
        broker_retry_in=dispatcher.backoff.until - now,
    )
    return dispatched.sent
