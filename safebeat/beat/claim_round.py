"""One claim round of beat: the store's tick run with the planner, a tick the store ended for
outlasting `safebeat_lock_timeout` turned into `TickTooLong` (and a smaller batch next time),
a result that lacks its plan made safe, each planned entry paced to its next window; then
the outcome of publishing the claims (`Dispatcher.send`) recorded in the store, and counted."""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Mapping, Sequence
from datetime import datetime, timedelta

from safebeat import hooks
from safebeat.beat.batching import ClaimBatch
from safebeat.beat.dispatch import Dispatcher, Sending
from safebeat.beat.metrics import BeatMetrics
from safebeat.beat.pacing import Pacing
from safebeat.beat.planning import Planned
from safebeat.beat.reporting import report_dispatch, report_plan, skipped_windows
from safebeat.config import Config
from safebeat.errors import StoreError, StoreUnavailable, TickTooLong
from safebeat.identity import Replica
from safebeat.records import Claim, EntryState, Reclaim, StaleMark, TickResult
from safebeat.stores import Store

logger = logging.getLogger("safebeat.scheduler")

Planner = Callable[[datetime, Mapping[str, EntryState]], Planned]


class ClaimRounds:
    """Beat's claim rounds in one store namespace, and the batch of due entries a round
    claims: halved after a round the store ended for lasting too long, grown back after
    quick ones (see `safebeat.beat.batching`)."""

    def __init__(
        self,
        store: Callable[[], Store],
        config: Config,
        replica: Replica,
        *,
        batch: ClaimBatch,
        pacing: Pacing,
        dispatcher: Dispatcher,
        metrics: BeatMetrics,
        monotonic: Callable[[], float],
    ) -> None:
        self._store, self._config, self._replica = store, config, replica
        self._pacing, self._dispatcher = pacing, dispatcher
        self._metrics, self._monotonic = metrics, monotonic
        self.batch = batch
        # Where the last take-over pass ended in the store's stale claims: the next one
        # reads the page after it (None: from the oldest).
        self._reclaim_after: StaleMark | None = None
        #: Entries that could not be planned (state unreadable, windows not computed),
        #: with what was said, so that each error's detail is said once.
        self.unplanned: dict[str, str] = {}
        #: Entries whose rows the store refuses, with why (said once), until a round
        #: claims for them again.
        self.refused: dict[str, str] = {}

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
        reclaim: Container[str] | None,
        reclaim_limit: int,
        reclaim_page: int,
        started: float,
        retry_after: timedelta,
    ) -> TickResult | None:
        """Run one store tick for `due` (begun at monotonic `started`), taking over the stale
        claims of the entries in `reclaim` if set (the store only tests membership): up to
        `reclaim_limit` of the page of `reclaim_page` stale claims after the one where the
        last pass ended. None if another replica holds the tick lock. Each of `due` is
        paced to the next window it planned.

        When the store refuses the tick's rows (a StoreError that is not StoreUnavailable,
        while a tick writing nothing works), the entries are ticked by halves until each
        refusal is one entry's: that entry is put aside until `retry_after` and said once
        (`refused`), and the others' windows are claimed as usual.
        """

        def one(part: Sequence[str], defines: Container[str] | None) -> TickResult | None:
            takeover = (
                None
                if defines is None
                else Reclaim(
                    defines,
                    self._config.claim_timeout,
                    reclaim_limit,
                    reclaim_page,
                    self._reclaim_after,
                )
            )
            return self._one(part, planner, takeover, started=started, retry_after=retry_after)

        try:
            whole = one(due, reclaim)
        except StoreUnavailable:
            raise
        except StoreError:
            if not due:
                raise
            # Refused rows, or a store that fails whatever it writes (a missing schema)?
            probe = one((), None)
            if probe is None:
                return None
        else:
            if whole is not None:
                for name in due:
                    self.refused.pop(name, None)
            return whole
        results: list[TickResult] = []
        refused: dict[str, StoreError] = {}

        def apart(part: Sequence[str], reclaim: Container[str] | None) -> None:
            half = len(part) // 2
            for piece, takeover in ((part[:half], reclaim), (part[half:], None)):
                try:
                    result = one(piece, takeover)
                except StoreUnavailable:
                    raise
                except StoreError as exc:
                    if len(piece) > 1:
                        apart(piece, takeover)
                    else:
                        refused[piece[0]] = exc
                    continue
                if result is not None:
                    results.append(result)
                    for name in piece:
                        self.refused.pop(name, None)

        apart(due, reclaim)
        for name, exc in refused.items():
            self._pacing.schedule_next(name, probe.now + retry_after, probe.now, started)
            if name not in self.refused:  # said once: the server's detail varies each time
                self._metrics.entry_error(name)
                logger.error(
                    "safebeat: entry %r: the store refuses its windows' rows (%s); it is put "
                    "aside and tried again in %.0fs, the other entries run",
                    name,
                    exc,
                    retry_after.total_seconds(),
                )
            self.refused[name] = str(exc)
        return _merged(results, probe)

    def _one(
        self,
        due: Sequence[str],
        planner: Planner,
        takeover: Reclaim | None,
        *,
        started: float,
        retry_after: timedelta,
    ) -> TickResult | None:
        """One store tick for `due`, taking over per `takeover` (see `run`)."""
        store, config = self._store(), self._config
        limit = config.lock_timeout.total_seconds()
        planned_once = False

        def planning(now: datetime, states: Mapping[str, EntryState]) -> Planned:
            nonlocal planned_once
            planned_once = True
            return planner(now, states)

        try:
            result = store.tick(
                config.namespace, due, planning, replica=self._replica, reclaim=takeover
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
        report_plan(planned, self._metrics, self.unplanned)
        for name in due:
            upcoming = planned.upcoming.get(name, result.now)
            self._pacing.schedule_next(name, upcoming, result.now, started)
        if takeover is not None:
            self._took_over(started, takeover, result)
        return result

    def _took_over(self, started: float, takeover: Reclaim, result: TickResult) -> None:
        """Remember where the take-over pass ended and pace the next: sooner while the
        passes read through pages of claims they leave (other replicas' entries, or
        entries nobody defines), so a claim behind them is not a page per pass late."""
        page = result.reclaim_page  # None from a store outside the contract: from the oldest
        self._reclaim_after = None if page is None else page.resume
        reading_on = self._reclaim_after is not None and len(result.reclaimed) < takeover.limit
        lease = self._config.execution_lease
        self._pacing.reclaimed(started, takeover.timeout, lease, reading_on=reading_on)

    def settle(
        self,
        claims: Sequence[Claim],
        sending: Sending,
        *,
        claimed_at: float,
        store_now: datetime | None,
    ) -> Sequence[Claim]:
        """Record in the store what `send` did with `claims`; count and log it; return the
        claims sent."""
        if not claims:
            return ()
        dispatcher = self._dispatcher
        dispatched = dispatcher.settle(self._store(), self._config.namespace, claims, sending)
        now = self._monotonic()
        report_dispatch(
            dispatched,
            self._metrics,
            published_at=None
            if store_now is None
            else store_now + timedelta(seconds=now - claimed_at),
            broker_retry_in=dispatcher.backoff.until - now,
        )
        return dispatched.sent


def _merged(results: Sequence[TickResult], probe: TickResult) -> TickResult:
    """The ticks of one round run by parts, as one result (`probe`'s if none claimed)."""
    if not results:
        return probe
    plans = [r.plan for r in results]
    plan = Planned(
        claims=[c for p in plans for c in p.claims],
        skips=[s for p in plans for s in p.skips],
        advances={k: v for p in plans for k, v in p.advances.items()},
        upcoming={k: v for p in plans if isinstance(p, Planned) for k, v in p.upcoming.items()},
        errors={k: v for p in plans if isinstance(p, Planned) for k, v in p.errors.items()},
    )
    return TickResult(
        now=max(r.now for r in results),
        states={k: v for r in results for k, v in r.states.items()},
        claimed=[c for r in results for c in r.claimed],
        reclaimed=[c for r in results for c in r.reclaimed],
        plan=plan,
        reclaim_page=next((r.reclaim_page for r in results if r.reclaim_page), None),
    )


def _plan_of(
    result: TickResult, due: Sequence[str], store_url: str, retry_after: timedelta
) -> Planned:
    """The plan in `result`; from a store outside the contract, which returned none, a plan
    that looks at `due` again after `retry_after` (never spin)."""
    if isinstance(result.plan, Planned):
        return result.plan
    logger.error(
        "safebeat: store %s returned a tick result without the plan its planner made "
        "(TickResult.plan, see safebeat.stores.protocols.TickStore.tick); its entries are "
        "looked at every %.0fs instead",
        store_url,
        retry_after.total_seconds(),
    )
    return Planned(upcoming=dict.fromkeys(due, result.now + retry_after))


def traced(
    namespace: str, replica: str, run: Callable[[], Sequence[TickResult] | None]
) -> Sequence[TickResult] | None:
    """`run` (claim rounds and their publishes; None if the tick lock was busy) inside the
    tick hooks (`safebeat.hooks.around_tick`), told what they did."""
    with hooks.ticking(namespace, replica) as tick:
        results = run()
        done = results or ()
        tick.claimed = sum(len(result.claimed) for result in done)
        tick.skipped = sum(skipped_windows(result.plan.skips) for result in done)
        tick.republished = sum(len(result.reclaimed) for result in done)
        tick.busy = results is None
    return results
