"""`safebeat.Scheduler`: a Celery beat scheduler you can run in every replica.

It owns `tick()`. Each tick, for the entries whose next window has come: take the
store's tick lock (or come back shortly if another replica holds it), compute the due
windows from the shared state and the store's clock, claim them under a unique key,
commit, publish the claimed ones with a deterministic task id, and record them as sent.
Nothing store-specific lives here; nothing raised in a tick escapes into Celery's loop.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from celery import beat

from safebeat.app_schedule import settings_source
from safebeat.batching import ClaimBatch
from safebeat.config import Config, config_from_app
from safebeat.contrib import opentelemetry
from safebeat.dispatch import Dispatcher
from safebeat.due_times import DueTimes
from safebeat.entries import Entry, compile_schedule
from safebeat.errors import EntryError, StoreError, StoreUnavailable, TickTooLong
from safebeat.guard import TickGuard
from safebeat.housekeeping import heartbeat, prune
from safebeat.identity import current_replica
from safebeat.liveness import HEARTBEAT_INTERVAL
from safebeat.metrics import BeatMetrics
from safebeat.planning import Planned, plan_tick, queue_timeouts
from safebeat.publishing import Publisher
from safebeat.records import Claim, EntryState, Reclaim, TickResult
from safebeat.reporting import (
    announce_tick,
    report_claims,
    report_dispatch,
    report_entries,
    report_plan,
    report_registration,
    report_unregistered,
    serve_metrics,
    skipped_windows,
)
from safebeat.runtime import compile_runtime
from safebeat.stores import Store, store_from_config
from safebeat.urls import redact

logger = logging.getLogger("safebeat.scheduler")


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
    #: Whether this scheduler runs the entries added at run time (`safebeat.schedules`).
    runs_runtime_entries = True
    #: Seconds between two looks at the version of the entries added at run time.
    runtime_interval = 1.0
    #: Most entries one tick claims; more due entries are taken by the next, immediate tick,
    #: so the time between a claim and its publish stays short however large the burst.
    #: A tick the store ends for outlasting safebeat_lock_timeout halves it, down to
    #: `min_claim_batch` (see `safebeat.batching`).
    claim_batch = 5000
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
        self._due_at = DueTimes()
        self._next_heartbeat = 0.0
        self._next_reclaim = 0.0
        self._next_prune = 0.0
        self._last_store_now: datetime | None = None
        self._batch = ClaimBatch(self.claim_batch, self.min_claim_batch)
        self._planning = False  # set while the store runs our planner
        self._queue_timeouts: dict[str, timedelta] = {}
        self._runtime_specs: dict[str, str] = {}
        self._runtime_version: int | None = None
        self._next_runtime_look = 0.0
        self._runtime_clashes: frozenset[str] = frozenset()
        self.metrics = BeatMetrics(
            self.safebeat_config.namespace, self.replica.id, redact(self.safebeat_config.url)
        )
        self._guard = TickGuard(
            self.metrics,
            monotonic=self._monotonic,
            max_sleep=self.max_interval,
            store_url=lambda: self.store.display_url,
            sender=self,
        )
        self.dispatcher = Dispatcher(
            app,
            claim_timeout=self.safebeat_config.claim_timeout,
            replica=self.replica.id,
            monotonic=self._monotonic,
        )
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
        self.data = dict(self.entries)
        self._queue_timeouts = queue_timeouts(self.safebeat_config.overlap_timeout, entries)
        self._ready = False

    def refresh_entries(self) -> None:
        """Called at the start of every tick; a subclass whose entries change while beat
        runs calls `use_entries` from here. By default: every `runtime_interval`, pick up
        the entries added at run time (`safebeat.schedules`) if their version moved."""
        if (
            self.runs_runtime_entries
            and self._ready
            and self._monotonic() >= self._next_runtime_look
        ):
            self._look_at_runtime_entries()

    def _look_at_runtime_entries(self) -> None:
        """One read of the version; the definitions only when it moved."""
        config = self.safebeat_config
        self._next_runtime_look = self._monotonic() + self.runtime_interval
        version = self.store.runtime_version(config.namespace)
        if version == self._runtime_version:
            return
        specs = self.store.runtime_entries(config.namespace)
        self._runtime_version = version
        if specs == self._runtime_specs:
            return
        logger.info(
            "safebeat: entries added at run time changed: %d stored (version %d)",
            len(specs),
            version,
        )
        self._runtime_specs = specs
        self.use_entries(*self._compiled_entries())

    def _compiled_entries(self) -> tuple[dict[str, Entry], dict[str, EntryError]]:
        """The code's entries (`schedule_source`) and the entries added at run time; a
        stored entry whose name the code uses is left out (the code's runs) and reported."""
        app_timezone, config = self.app.timezone, self.safebeat_config
        entries, broken = compile_schedule(
            self.schedule_source(), app_timezone=app_timezone, config=config
        )
        runtime = compile_runtime(
            self._runtime_specs,
            taken=entries.keys() | broken.keys(),
            app_timezone=app_timezone,
            config=config,
        )
        for name in sorted(runtime.clashes - self._runtime_clashes):
            logger.error(
                "safebeat: entry %r was added at run time but the app's beat_schedule defines "
                "it too; the code's entry runs: remove the stored one with `safebeat schedule "
                "remove %s`",
                name,
                name,
            )
        self._runtime_clashes = runtime.clashes
        self.metrics.runtime_entries(len(runtime.entries))
        return {**entries, **runtime.entries}, {**broken, **runtime.broken}

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
        """Stop cleanly: this replica's heartbeat is removed, so `safebeat status` drops it."""
        try:
            super().close()
        finally:
            if self._store is not None:
                if self._next_heartbeat:
                    self._forget_replica()
                self._store.close()

    def _forget_replica(self) -> None:
        try:
            self.store.forget_replica(self.safebeat_config.namespace, self.replica)
        except StoreError as exc:
            logger.warning("safebeat: could not remove this replica's heartbeat: %s", exc)

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
        store, config = self.store, self.safebeat_config
        if config.auto_migrate:
            store.migrate()
        if self.runs_runtime_entries:
            self._look_at_runtime_entries()  # before registering: they are registered too
        registration = store.register(
            config.namespace, [e.definition for e in self.entries.values()], self.replica
        )
        report_registration(registration.changed, self.entries)
        now = self._monotonic()
        self._due_at = DueTimes(dict.fromkeys(self.entries, now))
        self._ready = True
        self._heartbeat()
        return 0.0

    def _tick(self) -> float:
        now = self._monotonic()
        self.refresh_entries()
        if not self._ready:
            self._bootstrap()
        # The most overdue first: with more due entries than one tick claims, entries that
        # were just sent must not come back ahead of the ones still waiting.
        if self._batch.ceiling != self.claim_batch:  # set on the instance after __init__
            self._batch = ClaimBatch(self.claim_batch, self.min_claim_batch)
        due = self._due_at.due(now, self._batch.size)
        reclaim = now >= self._next_reclaim
        if (due or reclaim) and not self._can_publish():
            # Claiming (or taking over) now would only leave unsent claims for the other
            # replicas to wait a claim timeout for; windows that pass meanwhile follow
            # the missed-window policy, and the replicas that reach the broker send them.
            due, reclaim = [], False
        if due or reclaim:
            with opentelemetry.tick_span(self.safebeat_config.namespace, self.replica.id) as span:
                result = self._locked_tick(due, reclaim=reclaim)
                span.done(
                    claimed=0 if result is None else len(result.claimed),
                    skipped=0 if result is None else skipped_windows(result.plan.skips),
                    republished=0 if result is None else len(result.reclaimed),
                    busy=result is None,
                )
            if result is None:
                self.metrics.lock_busy()
                return self.busy_retry * random.uniform(0.5, 1.5)  # noqa: S311 - jitter
        if now >= self._next_heartbeat:
            self._heartbeat()
        if now >= self._next_prune and self._last_store_now is not None:
            self._prune(self._last_store_now)
        return self._sleep_time()

    def _can_publish(self) -> bool:
        reconnecting = self.dispatcher.backoff.failures > 0
        ready = self.dispatcher.can_publish(self.connection)
        if ready and reconnecting:
            # The check closed the connection the cached producer's channel was on.
            self.__dict__.pop("producer", None)
        return ready

    def _locked_tick(self, due: Sequence[str], *, reclaim: bool) -> TickResult | None:
        config = self.safebeat_config
        started = self._monotonic()
        lock_timeout = config.lock_timeout.total_seconds()
        self._planning = False
        try:
            result = self.store.tick(
                config.namespace,
                due,
                self._planner,
                replica=self.replica,
                reclaim=(
                    Reclaim(list(self.entries), config.claim_timeout, self.reclaim_limit)
                    if reclaim
                    else None
                ),
            )
        except StoreUnavailable as exc:
            # The store answered the tick's first message (it ran our planner) and the tick
            # failed after the lock timeout: the store ended it for lasting too long.
            took = self._monotonic() - started
            if isinstance(exc, TickTooLong) or (self._planning and took >= lock_timeout):
                size = self._batch.too_long()
                raise TickTooLong(
                    f"tick took longer than safebeat_lock_timeout ({lock_timeout:g}s): "
                    f"{len(due)} entries in {took:.1f}s, and the store ended it, writing "
                    f"nothing; claiming fewer entries per tick ({size}) [{exc}]"
                ) from exc
            raise
        if result is None:
            return None
        self._batch.finished(seconds=self._monotonic() - started, lock_timeout=lock_timeout)
        self._last_store_now = result.now
        planned = result.plan
        if not isinstance(planned, Planned):  # a store outside the contract: never spin
            logger.error(
                "safebeat: store %s returned a tick result without the plan its planner made "
                "(TickResult.plan, see safebeat.stores.base.TickStore.tick); its entries are "
                "looked at every %.0fs instead",
                self.store.display_url,
                self.max_interval,
            )
            retry_at = result.now + timedelta(seconds=self.max_interval)
            planned = Planned(upcoming=dict.fromkeys(due, retry_at))
        report_plan(planned, self.metrics)
        for name in due:
            self._schedule_next(name, planned.upcoming.get(name, result.now), result.now, started)
        if report_unregistered(due, result.states):
            self._ready = False  # register again before the next tick claims
        if reclaim:
            self._next_reclaim = started + config.claim_timeout.total_seconds() / 2
        report_claims(result.claimed, result.reclaimed, self.metrics)
        announce_tick(self, result, config.namespace, self.replica.id)
        self._publish([*result.claimed, *result.reclaimed], claimed_at=started)
        return result

    def _planner(self, now: datetime, states: Mapping[str, EntryState]) -> Planned:
        """The pure planner, with this replica's entries (run by the store under its lock)."""
        self._planning = True
        return plan_tick(
            self.entries,
            states,
            now,
            namespace=self.safebeat_config.namespace,
            retry_after=timedelta(seconds=self.max_interval),
            queue_timeouts=self._queue_timeouts,
        )

    def _schedule_next(
        self, name: str, upcoming: datetime | None, now: datetime, started: float
    ) -> None:
        if upcoming is None:
            self._due_at.remove(name)
            logger.info("safebeat: entry %r has no more windows", name)
            return
        self._due_at.set(name, started + max(0.0, (upcoming - now).total_seconds()))

    def _publish(self, claims: Sequence[Claim], *, claimed_at: float) -> None:
        """Publish claimed windows through the dispatcher; count and log what happened."""
        if not claims:
            return
        dispatched = self.dispatcher.dispatch(
            self.store,
            self.safebeat_config.namespace,
            claims,
            entries=self.entries,
            connection=self.connection,
            producer=lambda: self.producer,
            claimed_at=claimed_at,
        )
        now = self._monotonic()
        store_now = self._last_store_now
        report_dispatch(
            dispatched,
            self.metrics,
            published_at=None
            if store_now is None
            else store_now + timedelta(seconds=now - claimed_at),
            broker_retry_in=self.dispatcher.backoff.until - now,
        )
        if dispatched.sent:
            self.published(dispatched.sent)

    def _heartbeat(self) -> None:
        digests = {name: entry.digest for name, entry in self.entries.items()}
        heartbeat(
            self.store,
            self.safebeat_config,
            self.replica,
            digests,
            self.metrics,
            interval=self.heartbeat_interval,
        )
        self._next_heartbeat = self._monotonic() + self.heartbeat_interval

    def _prune(self, now: datetime) -> None:
        prune(self.store, self.safebeat_config, now)
        self._next_prune = self._monotonic() + self.prune_interval

    def _sleep_time(self) -> float:
        now = self._monotonic()
        deadlines = [self._next_heartbeat, self._next_reclaim]
        earliest = self._due_at.earliest()
        if earliest is not None:
            deadlines.append(earliest)
        if self.runs_runtime_entries:
            deadlines.append(self._next_runtime_look)
        if self.dispatcher.backoff.waiting(now):
            deadlines = [self.dispatcher.backoff.until, self._next_heartbeat]
        return max(0.0, min(min(deadlines) - now, self.max_interval))
