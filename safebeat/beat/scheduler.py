"""`safebeat.Scheduler`: a Celery beat scheduler you can run in every replica.

Celery's `beat.Scheduler` interface over the tick engine (`safebeat.beat.engine`), which
owns `tick()`: each tick claims the due windows under the store's lock, publishes them
with deterministic task ids and records them as sent. This class compiles the app's
entries, hands the engine Celery's broker connection, and keeps the hooks a subclass
extends (`schedule_source`, `compiled_schedule`, `refresh_entries`, `published`) and the
knobs it sets (`safebeat.beat.tuning.Tuning`). Nothing raised in a tick escapes into
Celery's loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from celery import beat

from safebeat.beat.dispatch import Dispatcher
from safebeat.beat.engine import EngineHooks, TickEngine
from safebeat.beat.metrics import BeatMetrics
from safebeat.beat.probes import ProbeState
from safebeat.beat.publishing import Publisher
from safebeat.beat.tuning import Tuning
from safebeat.config import Config, config_from_app, url_origin
from safebeat.entries import Entry
from safebeat.entries.app_entries import settings_source
from safebeat.errors import EntryError
from safebeat.identity import current_replica
from safebeat.records import Claim
from safebeat.store_urls import redact
from safebeat.stores import Store

logger = logging.getLogger("safebeat.scheduler")


class Scheduler(Tuning, beat.Scheduler):  # type: ignore[misc]  # Celery is untyped
    """Celery beat scheduler that dispatches each window once, however many replicas run.

    Use it with `celery -A proj beat -S safebeat.Scheduler` (or `-S safebeat`), in as
    many processes as you like. Configuration: the `safebeat_*` settings (see
    `safebeat.config`); the knobs of the tick are `Tuning`'s class attributes. Extra
    keyword arguments, for tests and embedding: `store` (a Store to use instead of opening
    `safebeat_url`) and `monotonic` (the clock used to measure sleeps; pair it with the
    store's clock).
    """

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
        monotonic = monotonic or time.monotonic
        config = self.safebeat_config
        self.engine = TickEngine(
            config,
            self.replica,
            dispatcher=Dispatcher(
                app, claim_timeout=config.claim_timeout, replica=self.replica, monotonic=monotonic
            ),
            broker=self,
            hooks=EngineHooks(
                schedule_source=self.schedule_source,
                timezone=lambda: self.app.timezone,
                compiled=self.compiled_schedule,
                refresh=self.refresh_entries,
                published=self.published,
                entries_changed=self._entries_changed,
                sender=self,
            ),
            tuning=self,
            store=store,
            monotonic=monotonic,
        )
        super().__init__(app, *args, lazy=lazy, **kwargs)

    # --- what the engine holds ------------------------------------------------------------

    @property
    def store(self) -> Store:
        return self.engine.store

    @property
    def entries(self) -> dict[str, Entry]:
        """The compiled entries this scheduler runs."""
        return self.engine.entries

    @property
    def broken_entries(self) -> dict[str, EntryError]:
        """The entries that did not compile (or whose rows the store refuses), with why."""
        return self.engine.broken_entries

    @property
    def metrics(self) -> BeatMetrics:
        return self.engine.metrics

    @property
    def probes(self) -> ProbeState:
        """What this replica's `/livez` and `/readyz` answer."""
        return self.engine.probes

    @property
    def dispatcher(self) -> Dispatcher:
        return self.engine.dispatcher

    @property
    def publisher(self) -> Publisher:
        """Builds and sends each window's message (the dispatcher's)."""
        return self.engine.dispatcher.publisher

    # --- hooks a subclass extends ---------------------------------------------------------

    def schedule_source(self) -> dict[str, Any]:
        """The `beat_schedule` items to compile: stock beat's own and the app's.

        A subclass that reads schedules from elsewhere extends this (see
        `safebeat.contrib.django.DatabaseScheduler`).
        """
        return settings_source(self.app)

    def compiled_schedule(self) -> tuple[dict[str, Entry], dict[str, EntryError]]:
        """The entries to run when set up, compiled: the code's (`schedule_source`) and
        the entries added at run time. A subclass that runs entries of its own besides
        the code's extends this (see `safebeat.contrib.django.DatabaseScheduler`)."""
        return self.engine.compiled_entries()

    def use_entries(self, entries: dict[str, Entry], broken: dict[str, EntryError]) -> None:
        """Run exactly these compiled entries from now on; report the broken ones (once each).

        Entries that changed are registered again before the next tick claims anything.
        """
        self.engine.use_entries(entries, broken)

    def refresh_entries(self) -> None:
        """Called at the start of every tick; a subclass whose entries change while beat
        runs calls `use_entries` from here. By default: every `runtime_interval`, pick up
        the entries added at run time (`safebeat.schedules`) if their version moved."""
        self.engine.refresh_runtime_entries()

    def published(self, claims: Sequence[Claim]) -> None:
        """Called with the claims just published and recorded as sent. Does nothing by default."""

    def _entries_changed(self, entries: Mapping[str, Entry]) -> None:
        # Celery's `schedule` (its `data`): a read-only view, not a copy of every entry.
        self.data = MappingProxyType(entries)

    def _compiled_entries(self) -> tuple[dict[str, Entry], dict[str, EntryError]]:
        """The code's entries (`schedule_source`) and the entries added at run time."""
        return self.engine.compiled_entries()

    # --- Celery's Scheduler interface -----------------------------------------------------

    def setup_schedule(self) -> None:
        """Compile the entries and try to reach the store; a store that is down is retried."""
        self.engine.setup()

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Dispatch every due window; return seconds to sleep. Never raises."""
        return self.engine.tick()

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
            self.engine.close()

    @property
    def info(self) -> str:
        config = self.safebeat_config
        return (
            f"    . safebeat -> {redact(config.url)} "
            f"(namespace {config.namespace!r}, replica {self.replica.id}; "
            f"store URL from {url_origin(config)})"
        )

    # --- the broker, as the engine sees it (`safebeat.beat.engine.BrokerLink`) ------------
    # `connection` and `producer` are Celery's (cached on first use).

    def forget_producer(self) -> None:
        """Drop Celery's cached producer: its channel was on a connection since closed."""
        self.__dict__.pop("producer", None)

    def _ensure_connected(self) -> Any:
        # Stock beat retries a dead broker up to broker_connection_max_retries times
        # inside tick(); we fail fast instead: claims stay unsent and are re-published.
        def report(exc: Exception, interval: float) -> None:
            logger.warning("safebeat: broker connection error: %s", exc)

        return self.connection.ensure_connection(report, max_retries=1)
