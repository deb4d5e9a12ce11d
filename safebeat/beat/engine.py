"""Beat's tick engine: one tick of one replica, apart from Celery.

Each tick, for the entries whose next window has come: take the store's tick lock (or come
back shortly if another replica holds it), compute the due windows from the shared state
and the store's clock, claim them under a unique key, commit, publish the claimed ones
with a deterministic task id, and record them as sent; rounds follow while more entries
are due (`safebeat.beat.tick_rounds`). Then the heartbeat and housekeeping, and the time
to sleep. Nothing raised in a tick escapes (`safebeat.beat.guard`).

The engine is built from explicit parts: the config, this replica, the store, a
`Dispatcher`, the broker's connection (`BrokerLink`), a clock, its `Tuning` and the
`EngineHooks` its owner is called back through; `safebeat.beat.wiring` builds the
parts it runs with from those. `safebeat.Scheduler` is Celery's
interface over it; the deterministic simulation (tests/simulation) drives it directly.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from datetime import datetime, timedelta

from safebeat.beat.batching import ClaimBatch
from safebeat.beat.claim_round import traced
from safebeat.beat.dispatch import Dispatcher
from safebeat.beat.entry_changes import entry_changes
from safebeat.beat.pipeline import PublishThread
from safebeat.beat.planning import queue_timeouts
from safebeat.beat.prewarming import Prewarming
from safebeat.beat.probe_server import ProbeServer, serve_probes
from safebeat.beat.probes import default_liveness_timeout
from safebeat.beat.publishing import Publisher
from safebeat.beat.reporting import (
    report_entries,
    serve_metrics,
)
from safebeat.beat.round_steps import BrokerLink, EngineHooks, EngineRoundSteps
from safebeat.beat.tick_rounds import TickRounds
from safebeat.beat.tuning import Tuning
from safebeat.beat.wiring import wire_parts
from safebeat.config import Config
from safebeat.entries import Entry
from safebeat.errors import EntryError
from safebeat.identity import Replica
from safebeat.store_urls import redact
from safebeat.stores import Store, store_from_config

__all__ = ["BrokerLink", "EngineHooks", "TickEngine"]

logger = logging.getLogger("safebeat.scheduler")

Compiled = tuple[dict[str, Entry], dict[str, EntryError]]


class TickEngine(EngineRoundSteps):
    """One replica's ticks: every due window claimed once, published, recorded.

    `store` is opened from `config` when first needed if none is given; building the
    engine touches neither the store nor the broker. `tuning` is read at every use.
    """

    def __init__(
        self,
        config: Config,
        replica: Replica,
        *,
        dispatcher: Dispatcher,
        broker: BrokerLink,
        hooks: EngineHooks,
        tuning: Tuning | None = None,
        store: Store | None = None,
        monotonic: Callable[[], float],
        publish_thread: PublishThread | None = None,
    ) -> None:
        self.config, self.replica, self.dispatcher = config, replica, dispatcher
        self.tuning = Tuning() if tuning is None else tuning
        self.entries: dict[str, Entry] = {}
        self.broken_entries: dict[str, EntryError] = {}
        self.ready = False
        # Entries added or defined otherwise while beat ran, registered and planned before
        # the next tick claims anything (`_register_changes`); the others are left alone.
        # (name -> the digest this replica ran before, None for a new entry).
        self._unregistered: dict[str, str | None] = {}
        self.publish_thread = PublishThread() if publish_thread is None else publish_thread
        self._broker, self._hooks, self._store = broker, hooks, store
        self._monotonic = monotonic
        self._last_store_now: datetime | None = None
        self._queue_timeouts: dict[str, timedelta] = {}
        self._probe_server: ProbeServer | None = None
        self._prewarming = Prewarming(monotonic)
        parts = wire_parts(
            config,
            replica,
            dispatcher,
            store=lambda: self.store,
            monotonic=monotonic,
            batch=ClaimBatch(self.tuning.claim_batch, self.tuning.min_claim_batch),
            max_sleep=self.tuning.max_interval,
            sender=hooks.sender,
        )
        self.metrics, self.probes, self.pacing = parts.metrics, parts.probes, parts.pacing
        self.runtime, self.rounds = parts.runtime, parts.rounds
        self.chores, self.guard = parts.chores, parts.guard

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = store_from_config(self.config)
        return self._store

    # --- the entries ------------------------------------------------------------------------

    def use_entries(self, entries: dict[str, Entry], broken: dict[str, EntryError]) -> None:
        """Run exactly these compiled entries from now on; report the broken ones (once each).

        Entries that changed are registered again before the next tick claims anything:
        once beat has registered its entries, only the ones added or defined otherwise
        (by digest, `entry_changes`), and a removed one is planned no more; before that,
        every entry.
        """
        report_entries(entries, broken, self.broken_entries, self.metrics)
        before = self.entries
        self.entries, self.broken_entries = entries, broken
        self._hooks.entries_changed(entries)
        if self.config.liveness_timeout is None:
            # Celery has set max_interval (`--max-interval`) by now.
            self.probes.liveness_timeout = default_liveness_timeout(
                self.tuning.max_interval, len(entries)
            )
        self._queue_timeouts = queue_timeouts(self.config.overlap_timeout, entries)
        if not self.ready:
            return  # `bootstrap` registers and plans every entry
        changes = entry_changes(before, entries)
        for name in changes.removed:
            self.pacing.due_at.remove(name)
        for name in changes.changed:  # the first digest: the one the store may still have
            previous = before.get(name)
            self._unregistered.setdefault(name, None if previous is None else previous.digest)

    def compiled_entries(self) -> Compiled:
        """The code's entries (`schedule_source`) and the entries added at run time."""
        return self.runtime.compiled(
            self._hooks.schedule_source(),
            app_timezone=self._hooks.timezone(),
            config=self.config,
            metrics=self.metrics,
            running=self.entries,
        )

    def refresh_runtime_entries(self) -> None:
        """Every `runtime_interval`, pick up the entries added at run time
        (`safebeat.schedules`) if their version moved."""
        if (
            self.tuning.runs_runtime_entries
            and self.ready
            and self._monotonic() >= self.runtime.next_look
        ):
            self._look_at_runtime_entries()

    def _look_at_runtime_entries(self) -> None:
        """Compile the entries again if the ones added at run time changed."""
        namespace, now = self.config.namespace, self._monotonic()
        if self.runtime.look(self.store, namespace, now=now, interval=self.tuning.runtime_interval):
            # The owner's, as at set-up: a subclass's own entries stay beside the stored ones.
            self.use_entries(*self._owner_compiled())

    def _owner_compiled(self) -> Compiled:
        """The entries the owner runs (`EngineHooks.compiled`), else `compiled_entries`."""
        return (self._hooks.compiled or self.compiled_entries)()

    # --- starting, ticking, stopping --------------------------------------------------------

    def setup(self) -> None:
        """Compile the entries and try to reach the store; a store that is down is retried.

        The entries are the owner's (`EngineHooks.compiled`) when it compiles them: a
        scheduler that runs entries of its own besides the code's (django-celery-beat's
        rows) gives them all at once, so set up again it runs them, not the code's alone.
        """
        config = self.config
        if config.metrics_port is not None and not self.metrics.recording:
            serve_metrics(self.metrics, config.metrics_port)
        if config.probe_port is not None and self._probe_server is None:
            self._probe_server = serve_probes(self.probes, config.probe_port)
        self.use_entries(*self._owner_compiled())
        logger.info(
            "safebeat: %d entries, store %s, namespace %r, replica %s",
            len(self.entries),
            redact(config.url),
            config.namespace,
            self.replica.id,
        )
        self.guard.run(self._first_bootstrap)

    def _first_bootstrap(self) -> float:
        """Bootstrap with the owner's entries as they are now: a scheduler that refreshes
        its entries (django-celery-beat's rows over the settings) does so first, so that it
        never registers definitions only to replace them at the first tick (each replica
        warned at every start that the definitions differed)."""
        if self._hooks.refresh is not None:
            self._hooks.refresh()
        return self.bootstrap()

    def bootstrap(self) -> float:
        """Migrate (if asked), register the entries and send the first heartbeat."""
        self._unregistered = {}  # every entry is registered below
        if self.config.auto_migrate:
            self.store.migrate()
        if self.tuning.runs_runtime_entries:
            self._look_at_runtime_entries()  # before registering: they are registered too
        refused = self.chores.register(self.entries)
        if refused:  # put aside, reported like a bad entry; the others are registered
            good = {name: e for name, e in self.entries.items() if name not in refused}
            self.use_entries(good, {**self.broken_entries, **refused})
        self.pacing.restart(self.entries, self._monotonic())
        self.ready = True
        self.chores.heartbeat(self.entries, interval=self.tuning.heartbeat_interval)
        return 0.0

    def _register_changes(self) -> None:
        """Register the entries that changed while beat ran and plan them now; the others
        keep their registration and their plan. The next heartbeat sends the digests that
        changed and the names removed (`Housekeeper.heartbeat`).

        Not ready until it succeeds: if the store fails meanwhile, the next tick registers
        every entry (`bootstrap`), so no entry is claimed unregistered.
        """
        names = sorted(name for name in self._unregistered if name in self.entries)
        changed = {name: self.entries[name] for name in names}
        self.ready = False
        refused = self.chores.register(changed, self._unregistered) if changed else {}
        if refused:  # put aside, reported like a bad entry, as `bootstrap` does
            for name in refused:
                self.pacing.due_at.remove(name)
            good = {name: e for name, e in self.entries.items() if name not in refused}
            self.use_entries(good, {**self.broken_entries, **refused})
        now = self._monotonic()
        for name in names:
            if name not in refused:
                self.pacing.due_at.set(name, now)
        self._unregistered = {}
        self.ready = True

    def tick(self) -> float:
        """Dispatch every due window; return seconds to sleep. Never raises an Exception."""
        started = self._monotonic()
        if self.guard.backoff.waiting(started):
            return min(self.guard.backoff.until - started, self.tuning.max_interval)
        try:
            return self.guard.run(self._tick)
        finally:
            self.metrics.tick(self._monotonic() - started, succeeded=self.guard.succeeded)
            self.probes.loop_ran()

    def close(self) -> None:
        """Stop the publishing thread and the probes, remove this replica's heartbeat, close
        the store.

        Does nothing while a tick runs (a signal handler interrupted it): the store call
        it interrupted may hold the store's connection, so the store is left alone.
        """
        if self.guard.running:
            return
        self.publish_thread.close()
        if self._probe_server is not None:
            self._probe_server.close()
            self._probe_server = None
        if self._store is not None:
            self.chores.forget_replica()
            self._store.close()

    def _tick(self) -> float:
        tuning, now = self.tuning, self._monotonic()
        (self._hooks.refresh or self.refresh_runtime_entries)()
        if not self.ready:
            self.bootstrap()
        elif self._unregistered:
            self._register_changes()
        due = self.pacing.due(now, self._round_size(0))
        reclaim = now >= self.pacing.next_reclaim
        if (due or reclaim) and not self._can_publish():
            # Claiming (or taking over) now would only leave unsent claims for the other
            # replicas to wait a claim timeout for; windows that pass meanwhile follow
            # the missed-window policy, and the replicas that reach the broker send them.
            due, reclaim = [], False
        if due or reclaim:
            rounds = TickRounds(self, monotonic=self._monotonic)
            results = traced(
                self.config.namespace,
                self.replica.id,
                lambda: rounds.run(due, reclaim=reclaim, max_interval=tuning.max_interval),
            )
            if results is None:
                self.metrics.lock_busy()
                return tuning.busy_retry * random.uniform(0.5, 1.5)  # noqa: S311 - jitter
        self.chores.run_due(
            now,
            self._last_store_now,
            self.entries,
            heartbeat_interval=tuning.heartbeat_interval,
            prune_interval=tuning.prune_interval,
        )
        return self._prewarm(self._sleep_time())

    def _prewarm(self, sleep: float) -> float:
        """Spend a slice of `sleep` building the templates of the entries due next; the
        time to sleep after it, short while some are left (`safebeat.beat.prewarming`).
        Only here, once every publish of the tick has finished: the publisher is used by
        one thread at a time."""
        slice_seconds = self.tuning.prewarm_slice
        publisher = getattr(self.dispatcher, "publisher", None)
        if slice_seconds <= 0 or sleep <= slice_seconds or not isinstance(publisher, Publisher):
            return sleep
        until = self._monotonic() + min(slice_seconds, sleep / 2)
        more = self._prewarming.run(self.pacing.due_at, self.entries, publisher, until=until)
        sleep = self._sleep_time()
        return min(sleep, slice_seconds) if more else sleep

    def _can_publish(self) -> bool:
        reconnecting = self.dispatcher.backoff.failures > 0
        ready = self.dispatcher.can_publish(self._broker.connection)
        if ready and reconnecting:
            # The check closed the connection the cached producer's channel was on.
            self._broker.forget_producer()
        return ready

    def _sleep_time(self) -> float:
        now, backoff = self._monotonic(), self.dispatcher.backoff
        return self.pacing.sleep_time(
            now,
            heartbeat_at=self.chores.next_heartbeat,
            runtime_look_at=self.runtime.next_look if self.tuning.runs_runtime_entries else None,
            broker_until=backoff.until if backoff.waiting(now) else None,
            max_sleep=self.tuning.max_interval,
        )
