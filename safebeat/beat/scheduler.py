"""`safebeat.Scheduler`: a Celery beat scheduler you can run in every replica.

It owns `tick()`. Each tick, for the entries whose next window has come: take the
store's tick lock (or come back shortly if another replica holds it), compute the due
windows from the shared state and the store's clock, claim them under a unique key,
commit, publish the claimed ones with a deterministic task id, and record them as sent.
Nothing store-specific lives here; nothing raised in a tick escapes into Celery's loop.
While more entries are due, a tick goes on claiming round after round (for up to
`max_interval`), each round claimed while the one before it is published on a thread of
its own (`safebeat.beat.pipeline`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from celery import beat

from safebeat.app_schedule import settings_source
from safebeat.beat.batching import ClaimBatch
from safebeat.beat.claim_round import traced
from safebeat.beat.dispatch import Sending
from safebeat.beat.pipeline import BackgroundPublish, PublishedAlready, PublishThread
from safebeat.beat.planning import Planned, plan_tick, queue_timeouts
from safebeat.beat.publishing import Publisher
from safebeat.beat.reporting import (
    announce_tick,
    report_claims,
    report_entries,
    report_unregistered,
    serve_metrics,
)
from safebeat.beat.wiring import wire_parts
from safebeat.config import Config, config_from_app
from safebeat.entries import Entry
from safebeat.errors import EntryError
from safebeat.identity import current_replica
from safebeat.liveness import HEARTBEAT_INTERVAL
from safebeat.records import Claim, EntryState, TickResult
from safebeat.stores import Store, store_from_config
from safebeat.urls import redact

logger = logging.getLogger("safebeat.scheduler")


Publishing = BackgroundPublish[Sending] | PublishedAlready[Sending]


@dataclass(frozen=True)
class _Round:
    """One claim round of a tick: the store's result, the claims to publish (new and
    taken over), and the monotonic instant the claim began."""

    result: TickResult
    claims: Sequence[Claim]
    started: float


class Scheduler(beat.Scheduler):  # type: ignore[misc]  # Celery is untyped
    """Celery beat scheduler that dispatches each window once, however many replicas run.

    Use it with `celery -A proj beat -S safebeat.Scheduler` (or `-S safebeat`), in as
    many processes as you like. Configuration: the `safebeat_*` settings (see
    `safebeat.config`). Extra keyword arguments, for tests and embedding: `store` (a
    Store to use instead of opening `safebeat_url`) and `monotonic` (the clock used to
    measure sleeps; pair it with the store's clock).
    """

    #: Longest sleep between ticks: bounds how late a pause, a re-publish or a heartbeat is.
    max_interval = 5.0
    #: Seconds to wait before retrying when another replica holds the tick lock.
    busy_retry = 0.2
    #: Seconds between heartbeats of this replica.
    heartbeat_interval = HEARTBEAT_INTERVAL.total_seconds()
    #: Seconds between prunes of history older than `safebeat_retention`.
    prune_interval = 3600.0
    #: Most stale claims one tick takes over for re-publishing.
    reclaim_limit = 1000
    #: Most stale claims one take-over pass reads inside the tick's lock (a page, oldest
    #: first): the next pass reads the page after it, so the work under the lock stays the
    #: same however many claims went stale.
    reclaim_page = 4000
    #: Whether this scheduler runs the entries added at run time (`safebeat.schedules`).
    runs_runtime_entries = True
    #: Seconds between two looks at the version of the entries added at run time.
    runtime_interval = 1.0
    #: Most entries one tick claims; more due entries are taken by the next, immediate tick,
    #: so the time between a claim and its publish stays short however large the burst.
    #: A tick the store ends for outlasting safebeat_lock_timeout halves it, down to
    #: `min_claim_batch` (see `safebeat.beat.batching`).
    claim_batch = 5000
    #: Most due entries the first claim round of a tick takes, so publishing starts soon;
    #: each later round of the tick takes twice as many as the one before, up to
    #: `claim_batch`, and is claimed while the one before it is published.
    first_round = 500
    #: Publish each round on a thread of its own while the next is claimed (False: one
    #: after the other, on the thread that ticks).
    pipelined = True
    min_claim_batch = 10

    def __init__(
        self,
        app: Any,
        *args: Any,
        store: Store | None = None,
        monotonic: Callable[[], float] | None = None,
        lazy: bool = False,
        **kwargs: Any,
    ) -> None:
        # Everything here is pure: with lazy=True (the banner) nothing may touch the store.
        self.safebeat_config: Config = config_from_app(app)
        self.replica = current_replica()
        self.entries: dict[str, Entry] = {}
        self.broken_entries: dict[str, EntryError] = {}
        self._store = store
        self._monotonic = monotonic or time.monotonic
        self._ready = False
        self._last_store_now: datetime | None = None
        self._queue_timeouts: dict[str, timedelta] = {}
        self._publish_thread = PublishThread()
        parts = wire_parts(
            app,
            self.safebeat_config,
            self.replica,
            store=lambda: self.store,
            monotonic=self._monotonic,
            batch=ClaimBatch(self.claim_batch, self.min_claim_batch),
            max_sleep=self.max_interval,
            sender=self,
        )
        self.metrics, self.dispatcher = parts.metrics, parts.dispatcher
        self._pacing, self._runtime, self._rounds = parts.pacing, parts.runtime, parts.rounds
        self._chores, self._guard = parts.chores, parts.guard
        super().__init__(app, *args, lazy=lazy, **kwargs)

    # --- Celery's Scheduler interface -----------------------------------------------------

    @property
    def publisher(self) -> Publisher:
        """Builds and sends each window's message (the dispatcher's)."""
        return self.dispatcher.publisher

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = store_from_config(self.safebeat_config)
        return self._store

    def setup_schedule(self) -> None:
        """Compile the entries and try to reach the store; a store that is down is retried."""
        config = self.safebeat_config
        if config.metrics_port is not None and not self.metrics.recording:
            serve_metrics(self.metrics, config.metrics_port)
        self.use_entries(*self._compiled_entries())
        logger.info(
            "safebeat: %d entries, store %s, namespace %r, replica %s",
            len(self.entries),
            redact(config.url),
            config.namespace,
            self.replica.id,
        )
        self._guard.run(self._bootstrap)

    def schedule_source(self) -> dict[str, Any]:
        """The `beat_schedule` items to compile: stock beat's own and the app's.

        A subclass that reads schedules from elsewhere extends this (see
        `safebeat.contrib.django.DatabaseScheduler`).
        """
        return settings_source(self.app)

    def use_entries(self, entries: dict[str, Entry], broken: dict[str, EntryError]) -> None:
        """Run exactly these compiled entries from now on; report the broken ones (once each).

        Entries that changed are registered again before the next tick claims anything.
        """
        report_entries(entries, broken, self.broken_entries, self.metrics)
        self.entries, self.broken_entries = entries, broken
        # Celery's `schedule` (its `data`): a read-only view, not a copy of every entry.
        self.data = MappingProxyType(entries)
        self._queue_timeouts = queue_timeouts(self.safebeat_config.overlap_timeout, entries)
        self._ready = False

    def refresh_entries(self) -> None:
        """Called at the start of every tick; a subclass whose entries change while beat
        runs calls `use_entries` from here. By default: every `runtime_interval`, pick up
        the entries added at run time (`safebeat.schedules`) if their version moved."""
        if (
            self.runs_runtime_entries
            and self._ready
            and self._monotonic() >= self._runtime.next_look
        ):
            self._look_at_runtime_entries()

    def _look_at_runtime_entries(self) -> None:
        """Compile the entries again if the ones added at run time changed."""
        namespace, now = self.safebeat_config.namespace, self._monotonic()
        if self._runtime.look(self.store, namespace, now=now, interval=self.runtime_interval):
            self.use_entries(*self._compiled_entries())

    def _compiled_entries(self) -> tuple[dict[str, Entry], dict[str, EntryError]]:
        """The code's entries (`schedule_source`) and the entries added at run time."""
        return self._runtime.compiled(
            self.schedule_source(),
            app_timezone=self.app.timezone,
            config=self.safebeat_config,
            metrics=self.metrics,
        )

    def published(self, claims: Sequence[Claim]) -> None:
        """Called with the claims just published and recorded as sent. Does nothing by default."""

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Dispatch every due window; return seconds to sleep. Never raises."""
        started = self._monotonic()
        if self._guard.backoff.waiting(started):
            return min(self._guard.backoff.until - started, self.max_interval)
        try:
            return self._guard.run(self._tick)
        finally:
            self.metrics.tick(self._monotonic() - started)

    def should_sync(self) -> bool:
        return False  # all state lives in the store, written as it changes

    def sync(self) -> None:
        """Nothing to flush: claims and states are committed when they happen."""

    def close(self) -> None:
        """Stop cleanly: this replica's heartbeat is removed, so `safebeat status` drops it.

        Celery's SIGTERM handler calls this, then raises SystemExit, and calls it again
        once that has unwound the loop. A tick the signal interrupted may be inside a
        store call, holding the store's connection (psycopg's lock is not re-entrant):
        the store is left alone until the second call, or beat would hang there.
        """
        try:
            super().close()
        finally:
            if not self._guard.running:
                self._publish_thread.close()
                if self._store is not None:
                    self._chores.forget_replica()
                    self._store.close()

    @property
    def info(self) -> str:
        config = self.safebeat_config
        return (
            f"    . safebeat -> {redact(config.url)} "
            f"(namespace {config.namespace!r}, replica {self.replica.id})"
        )

    def _ensure_connected(self) -> Any:
        # Stock beat retries a dead broker up to broker_connection_max_retries times
        # inside tick(); we fail fast instead: claims stay unsent and are re-published.
        def report(exc: Exception, interval: float) -> None:
            logger.warning("safebeat: broker connection error: %s", exc)

        return self.connection.ensure_connection(report, max_retries=1)

    # --- the tick -------------------------------------------------------------------------

    def _bootstrap(self) -> float:
        if self.safebeat_config.auto_migrate:
            self.store.migrate()
        if self.runs_runtime_entries:
            self._look_at_runtime_entries()  # before registering: they are registered too
        refused = self._chores.register(self.entries)
        if refused:  # put aside, reported like a bad entry; the others are registered
            good = {name: e for name, e in self.entries.items() if name not in refused}
            self.use_entries(good, {**self.broken_entries, **refused})
        self._pacing.restart(self.entries, self._monotonic())
        self._ready = True
        self._chores.heartbeat(self.entries, interval=self.heartbeat_interval)
        return 0.0

    def _tick(self) -> float:
        now = self._monotonic()
        self.refresh_entries()
        if not self._ready:
            self._bootstrap()
        due = self._pacing.due(now, self._round_size(0))
        reclaim = now >= self._pacing.next_reclaim
        if (due or reclaim) and not self._can_publish():
            # Claiming (or taking over) now would only leave unsent claims for the other
            # replicas to wait a claim timeout for; windows that pass meanwhile follow
            # the missed-window policy, and the replicas that reach the broker send them.
            due, reclaim = [], False
        if due or reclaim:
            results = traced(
                self.safebeat_config.namespace,
                self.replica.id,
                lambda: self._claim_and_publish(due, reclaim=reclaim),
            )
            if results is None:
                self.metrics.lock_busy()
                return self.busy_retry * random.uniform(0.5, 1.5)  # noqa: S311 - jitter
        self._chores.run_due(
            now,
            self._last_store_now,
            self.entries,
            heartbeat_interval=self.heartbeat_interval,
            prune_interval=self.prune_interval,
        )
        return self._sleep_time()

    def _can_publish(self) -> bool:
        reconnecting = self.dispatcher.backoff.failures > 0
        ready = self.dispatcher.can_publish(self.connection)
        if ready and reconnecting:
            # The check closed the connection the cached producer's channel was on.
            self.__dict__.pop("producer", None)
        return ready

    def _round_size(self, rounds_before: int) -> int:
        """Due entries the claim round after `rounds_before` others in this tick takes."""
        batch = self._rounds.batch_size(self.claim_batch, self.min_claim_batch)
        return min(batch, max(self.first_round, 1) << min(rounds_before, 30))

    def _claim_and_publish(self, due: Sequence[str], *, reclaim: bool) -> list[TickResult] | None:
        """Claim `due` (and take over stale claims if `reclaim`), then publish round after
        round while more entries are due, for up to `max_interval`: each round's messages go
        to the broker on a thread of their own while this thread records the round before
        as sent and claims the next. None if another replica held the tick lock for the
        first round."""
        started = self._monotonic()
        current = self._claim(due, reclaim=reclaim, started=started)
        if current is None:
            return None
        results = [current.result]
        deadline = started + self.max_interval
        looked_at = set(due)
        publishing: Publishing | None = self._publish(current)
        while current is not None and publishing is not None:
            current, publishing = self._publish_while_claiming(
                current, publishing, deadline, len(results), looked_at
            )
            if current is not None:
                results.append(current.result)
        return results

    def _publish(self, claimed: _Round) -> Publishing:
        """Start publishing `claimed`: on a thread of its own when pipelining, else now."""

        def send(stop: Callable[[], bool]) -> Sending:
            return self.dispatcher.send(
                claimed.claims,
                entries=self.entries,
                connection=self.connection,
                producer=lambda: self.producer,
                claimed_at=claimed.started,
                stop=stop,
            )

        if not claimed.claims or not self._pipelining():
            return PublishedAlready(send)
        return self._publish_thread.start(send)

    def _publish_while_claiming(
        self,
        current: _Round,
        publishing: Publishing,
        deadline: float,
        rounds_before: int,
        looked_at: set[str],
    ) -> tuple[_Round | None, Publishing | None]:
        """While `current` is published, claim the next round (if entries are due and the
        tick has time left); once `current` is on the broker, start publishing the next
        round and record `current` meanwhile. Return the next round and its publishing."""
        try:
            following = self._next_round(deadline, rounds_before, looked_at)
        except Exception:
            self._settle(current, publishing.result())
            raise
        except BaseException:
            # SystemExit from a signal handler: the store call it interrupted may have
            # left the store's connection unusable. Stop publishing soon and record
            # nothing; what was sent is re-published, same task ids, after the claim timeout.
            # An error of that publish must not take the SystemExit's place.
            with suppress(Exception):
                publishing.result(stop=True)
            raise
        try:
            sending = publishing.result()
        except BaseException as exc:
            if not isinstance(exc, Exception):
                # SystemExit from a signal handler, raised while this thread waited: the
                # round stops at its next message (close() would otherwise let the thread
                # publish the rest, which nobody records as sent).
                with suppress(Exception):
                    publishing.result(stop=True)
                if following is not None:
                    # A store error here must not take the SystemExit's place: the
                    # tick would back off and go on claiming after SIGTERM.
                    self._hand_back_after_error(following)
            elif following is not None:
                self._hand_back(following)
            raise
        if following is not None and sending.broker_error is not None:
            # The broker is down: the next round is never handed to it, so its claims
            # go back to the store at once.
            self._settle(current, sending)
            self._hand_back(following)
            return None, None
        if following is None or not self._pipelining():
            # One after the other: a round waits for no publish but its own before it is
            # recorded, however short the claim timeout.
            try:
                self._settle(current, sending)
            except Exception:
                if following is not None:
                    self._hand_back_after_error(following)
                raise
            return following, None if following is None else self._publish(following)
        publishing_next = self._publish(following)
        try:
            self._settle(current, sending)
        except Exception:
            self._settle_after_error(following, publishing_next)
            raise
        except BaseException:
            with suppress(Exception):  # the SystemExit goes on, whatever that publish did
                publishing_next.result(stop=True)
            raise
        return following, publishing_next

    def _hand_back(self, claimed: _Round) -> None:
        """Give `claimed`'s claims back to the store, never handed to the broker."""
        self._rounds.settle(claimed.claims, Sending(), claimed_at=claimed.started, store_now=None)

    def _hand_back_after_error(self, claimed: _Round) -> None:
        """Hand `claimed` back while an error from recording the round before it is on its
        way out of the tick; if that fails too, its claims wait the claim timeout."""
        try:
            self._hand_back(claimed)
        except Exception:  # noqa: BLE001 - the error on its way out says what went wrong
            logger.debug("safebeat: handing back %d claim(s) failed", len(claimed.claims))

    def _settle_after_error(self, claimed: _Round, publishing: Publishing) -> None:
        """Record `claimed` once its publish ends, while an error from recording the round
        before it is on its way out of the tick; a second error is only logged (the claims
        then wait the claim timeout, and are re-published with the same task ids)."""
        sending = publishing.result()
        try:
            self._settle(claimed, sending)
        except Exception:
            logger.warning(
                "safebeat: could not record %d published claim(s) either; they are "
                "re-published with the same task ids after safebeat_claim_timeout",
                len(claimed.claims),
                exc_info=True,
            )

    def _pipelining(self) -> bool:
        """Whether to claim the next round while this one is published. A round claimed
        meanwhile waits up to `max_interval` for its own publish, and nothing is handed to
        the broker past half the claim timeout: with a claim timeout that short, claiming
        ahead would only age claims into take-overs, so the rounds go one after the other."""
        half_timeout = self.safebeat_config.claim_timeout.total_seconds() / 2
        return self.pipelined and half_timeout > self.max_interval

    def _next_round(
        self, deadline: float, rounds_before: int, looked_at: set[str]
    ) -> _Round | None:
        """The next round's claim: due entries this tick has not looked at yet (an entry
        due again already waits for the next tick, after the heartbeat and housekeeping)."""
        now = self._monotonic()
        if now >= deadline or not self._ready:
            return None
        due = [
            name
            for name in self._pacing.due(now, self._round_size(rounds_before))
            if name not in looked_at
        ]
        if not due:
            return None
        looked_at.update(due)
        return self._claim(due, reclaim=False, started=now)

    def _settle(self, claimed: _Round, sending: Sending) -> None:
        sent = self._rounds.settle(
            claimed.claims, sending, claimed_at=claimed.started, store_now=claimed.result.now
        )
        if sent:
            self.published(sent)

    def _claim(self, due: Sequence[str], *, reclaim: bool, started: float) -> _Round | None:
        """One claim round under the store's tick lock; None if another replica holds it."""
        config = self.safebeat_config
        result = self._rounds.run(
            due,
            self._planner,
            reclaim=self.entries if reclaim else None,
            reclaim_limit=self.reclaim_limit,
            reclaim_page=self.reclaim_page,
            started=started,
            retry_after=timedelta(seconds=self.max_interval),
        )
        if result is None:
            return None
        self._last_store_now = result.now
        refused = self._rounds.refused  # put aside this round: registered, rows refused
        if report_unregistered([n for n in due if n not in refused], result.states):
            self._ready = False  # register again before the next tick claims
        report_claims(result.claimed, result.reclaimed, self.metrics)
        announce_tick(self, result, config.namespace, self.replica.id)
        return _Round(result, [*result.claimed, *result.reclaimed], started)

    def _planner(self, now: datetime, states: Mapping[str, EntryState]) -> Planned:
        """The pure planner, with this replica's entries (run by the store under its lock)."""
        return plan_tick(
            self.entries,
            states,
            now,
            namespace=self.safebeat_config.namespace,
            retry_after=timedelta(seconds=self.max_interval),
            queue_timeouts=self._queue_timeouts,
        )

    def _sleep_time(self) -> float:
        now, backoff = self._monotonic(), self.dispatcher.backoff
        return self._pacing.sleep_time(
            now,
            heartbeat_at=self._chores.next_heartbeat,
            runtime_look_at=self._runtime.next_look if self.runs_runtime_entries else None,
            broker_until=backoff.until if backoff.waiting(now) else None,
            max_sleep=self.max_interval,
        )
