"""The steps of one claim round as `safebeat.beat.tick_rounds.TickRounds` calls them, over a
tick engine's parts (`RoundSteps`): which entries are due, the claim under the store's tick
lock, the plan, the publish and what is recorded after it. `TickEngine` is built on them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import Any, Protocol

from safebeat.beat.claim_round import ClaimRounds
from safebeat.beat.dispatch import Dispatcher, Sending
from safebeat.beat.metrics import BeatMetrics
from safebeat.beat.pacing import Pacing
from safebeat.beat.pipeline import PublishedAlready, PublishThread
from safebeat.beat.planning import Planned, plan_tick
from safebeat.beat.reporting import announce_tick, report_claims, report_unregistered
from safebeat.beat.tick_rounds import Publishing, Round
from safebeat.beat.tuning import Tuning
from safebeat.config import Config
from safebeat.entries import Entry
from safebeat.errors import EntryError
from safebeat.identity import Replica
from safebeat.records import Claim, EntryState
from safebeat.windows.searches import search_budget


class BrokerLink(Protocol):
    """The broker as the engine sees it: kombu's connection and a producer on it."""

    @property
    def connection(self) -> Any: ...

    @property
    def producer(self) -> Any: ...

    def forget_producer(self) -> None:
        """Drop the producer: the next use makes one on the connection as it is now."""


def _nothing(*args: object) -> None:
    """A hook that does nothing."""


@dataclass(frozen=True)
class EngineHooks:
    """What the engine calls back in the code that runs it.

    `schedule_source`: the code's entries (`beat_schedule` items) to compile, in
    `timezone()`; `compiled`: the entries to run at set-up, compiled by the owner from the
    code's and whatever else it runs (None: `TickEngine.compiled_entries`); `refresh`:
    called at the start of every tick (None: look at the entries added at run time,
    `TickEngine.refresh_runtime_entries`); `published`: the claims just published and
    recorded as sent; `entries_changed`: the entries run from now on; `sender`: what the
    signals and the guard's `tick_failed` name as their sender.
    """

    schedule_source: Callable[[], Mapping[str, Any]]
    timezone: Callable[[], tzinfo]
    compiled: Callable[[], tuple[dict[str, Entry], dict[str, EntryError]]] | None = None
    refresh: Callable[[], None] | None = None
    published: Callable[[Sequence[Claim]], None] = _nothing
    entries_changed: Callable[[Mapping[str, Entry]], None] = _nothing
    sender: object = None


class EngineRoundSteps:
    """One round's steps over the engine's parts; `TickEngine` sets every attribute below."""

    config: Config
    replica: Replica
    tuning: Tuning
    dispatcher: Dispatcher
    entries: dict[str, Entry]
    ready: bool
    metrics: BeatMetrics
    pacing: Pacing
    rounds: ClaimRounds
    publish_thread: PublishThread
    _broker: BrokerLink
    _hooks: EngineHooks
    _monotonic: Callable[[], float]
    _last_store_now: datetime | None
    _queue_timeouts: dict[str, timedelta]

    def _round_size(self, rounds_before: int) -> int:
        """Due entries the claim round after `rounds_before` others in this tick takes."""
        tuning = self.tuning
        batch = self.rounds.batch_size(tuning.claim_batch, tuning.min_claim_batch)
        return min(batch, max(tuning.first_round, 1) << min(rounds_before, 30))

    def due(self, now: float, rounds_before: int) -> list[str]:
        """The entries due at `now` for the round after `rounds_before` others."""
        return self.pacing.due(now, self._round_size(rounds_before))

    def claim(self, due: Sequence[str], *, reclaim: bool, started: float) -> Round | None:
        """One claim round under the store's tick lock; None if another replica holds it."""
        tuning = self.tuning
        result = self.rounds.run(
            due,
            self.plan,
            reclaim=self.entries if reclaim else None,
            reclaim_limit=tuning.reclaim_limit,
            reclaim_page=tuning.reclaim_page,
            started=started,
            retry_after=timedelta(seconds=tuning.max_interval),
        )
        aside = (*self.rounds.refused, *self.rounds.unplanned)  # of entries still run
        self.metrics.set_aside("store", [name for name in aside if name in self.entries])
        if result is None:
            return None
        self._last_store_now = result.now
        refused = self.rounds.refused  # put aside this round: registered, rows refused
        if report_unregistered([n for n in due if n not in refused], result.states):
            self.ready = False  # register again before the next tick claims
        report_claims(result.claimed, result.reclaimed, self.metrics)
        announce_tick(self._hooks.sender, result, self.config.namespace, self.replica.id)
        return Round(result, [*result.claimed, *result.reclaimed], started)

    def plan(self, now: datetime, states: Mapping[str, EntryState]) -> Planned:
        """The pure planner, with this replica's entries (run by the store under its lock).

        Custom schedules' searches for windows (`safebeat.windows.searches`) share a budget
        of a fiftieth of `safebeat_lock_timeout`: one that finds nothing for a long time goes
        on at the next ticks, rather than hold the lock past the store's bound, where the
        store would end the tick and every other entry's windows with it."""
        deadline = self._monotonic() + self.config.lock_timeout.total_seconds() / 50
        with search_budget(lambda: self._monotonic() > deadline):
            return plan_tick(
                self.entries,
                states,
                now,
                namespace=self.config.namespace,
                retry_after=timedelta(seconds=self.tuning.max_interval),
                queue_timeouts=self._queue_timeouts,
            )

    def pipelining(self) -> bool:
        """Whether to claim the next round while this one is published. A round claimed
        meanwhile waits up to `max_interval` for its own publish, and nothing is handed to
        the broker past half the claim timeout: with a claim timeout that short, claiming
        ahead would only age claims into take-overs, so the rounds go one after the other."""
        half_timeout = self.config.claim_timeout.total_seconds() / 2
        return self.tuning.pipelined and half_timeout > self.tuning.max_interval

    def publish(self, claimed: Round) -> Publishing:
        """Start publishing `claimed`: on the publishing thread when pipelining, else now."""
        broker = self._broker

        def send(stop: Callable[[], bool]) -> Sending:
            return self.dispatcher.send(
                claimed.claims,
                entries=self.entries,
                connection=broker.connection,
                producer=lambda: broker.producer,
                claimed_at=claimed.started,
                stop=stop,
            )

        if not claimed.claims or not self.pipelining():
            return PublishedAlready(send)
        return self.publish_thread.start(send)

    def settle(self, claimed: Round, sending: Sending) -> None:
        """Record what the publish of `claimed` did; tell the owner what went out."""
        sent = self.rounds.settle(
            claimed.claims, sending, claimed_at=claimed.started, store_now=claimed.result.now
        )
        if sent:
            self._hooks.published(sent)

    def hand_back(self, claimed: Round) -> None:
        """Give `claimed`'s claims back to the store, never handed to the broker."""
        self.rounds.settle(claimed.claims, Sending(), claimed_at=claimed.started, store_now=None)
