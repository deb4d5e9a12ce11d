"""Beat's standing in the store besides dispatching: registration, heartbeats of this replica,
pruning old history."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import overload

from safebeat._version import __version__
from safebeat.beat.entry_changes import EntryChanges, entry_changes
from safebeat.beat.metrics import BeatMetrics
from safebeat.beat.probes import ProbeState
from safebeat.beat.reporting import report_registration
from safebeat.config import Config
from safebeat.entries import Entry
from safebeat.errors import EntryError, StoreError, StoreUnavailable
from safebeat.identity import Replica
from safebeat.records import Definition
from safebeat.stores.protocols import Store, TickStore

logger = logging.getLogger("safebeat.scheduler")

#: How long one prune pass may spend deleting dispatch rows. Beat runs it between two
#: ticks, so a backlog (after an outage, or a shorter retention) is deleted over several
#: passes instead of holding up dispatching.
PRUNE_BUDGET = timedelta(seconds=1)
#: Seconds to the next prune pass after one that spent its whole budget: a backlog is
#: left, and is deleted at up to a tenth of beat's time until it is gone.
BACKLOG_PRUNE_INTERVAL = 10.0
NO_CHANGES = EntryChanges((), ())


def heartbeat(
    store: Store,
    config: Config,
    replica: Replica,
    digests: Mapping[str, str],
    metrics: BeatMetrics,
    *,
    interval: float,
    stored: EntryChanges | None,
) -> None:
    """Record that this replica is alive with the entry digests it runs: only that it is
    alive, or only the digests that changed and the names removed, if the store holds
    the others already (`stored`: what changed since, nothing if no entry did); in full
    if not or if it lost them; where metrics are served, count the replicas whose
    heartbeat is less than three intervals old."""
    namespace = config.namespace
    if stored is None or not _heartbeat_changes(store, namespace, replica, digests, stored):
        store.heartbeat(namespace, replica, __version__, digests)
    if metrics.recording:
        beats = store.heartbeats(namespace)
        alive_after = beats[0] - timedelta(seconds=3 * interval)
        metrics.replicas_alive(sum(beat >= alive_after for beat in beats))


def _heartbeat_changes(
    store: Store,
    namespace: str,
    replica: Replica,
    digests: Mapping[str, str],
    changes: EntryChanges,
) -> bool:
    """Send only `changes` (liveness only if there are none); False if the store has no
    record to apply them to, or takes no delta (a store written before `removed=`)."""
    if not changes:
        return store.heartbeat(namespace, replica, __version__, None)
    if getattr(store, "heartbeat_deltas", False) is not True:
        return False
    changed = {name: digests[name] for name in changes.changed}
    return store.heartbeat(namespace, replica, __version__, changed, removed=changes.removed)


def prune(store: TickStore, config: Config, now: datetime) -> None:
    """Delete history older than `safebeat_retention` (store time `now`) and expired keys,
    dispatch rows for up to `PRUNE_BUDGET`."""
    deleted = store.prune(config.namespace, now - config.retention, budget=PRUNE_BUDGET)
    if deleted:
        logger.info(
            "safebeat: pruned %d row(s): dispatches older than the retention, expired effect keys",
            deleted,
        )


class Digests(Mapping[str, str]):
    """Entry name -> digest, read from the entries themselves: a heartbeat sends them, and
    a dict of them would be one more entry of memory per entry."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Mapping[str, Entry]) -> None:
        self._entries = entries

    def __getitem__(self, name: str) -> str:
        return self._entries[name].digest

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


class Definitions(Sequence[Definition]):
    """The entries' definitions, each made when the store reads it: a list of them all
    would hold one more object per entry while registering (about 7 MiB at 100,000)."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Sequence[Entry]) -> None:
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, index: int) -> Definition: ...

    @overload
    def __getitem__(self, index: slice) -> list[Definition]: ...

    def __getitem__(self, index: int | slice) -> Definition | list[Definition]:
        if isinstance(index, slice):
            return [entry.definition for entry in self._entries[index]]
        return self._entries[index].definition

    def __iter__(self) -> Iterator[Definition]:
        return (entry.definition for entry in self._entries)


class Housekeeper:
    """One replica's standing in the store: its entries registered, and its chores on their
    timers (monotonic): a heartbeat every `heartbeat_interval` (told to `probes`), a prune
    every `prune_interval` (sooner while a backlog is left), and its heartbeat removed when
    it stops. The intervals are read at
    each call, so a scheduler may change them."""

    def __init__(
        self,
        store: Callable[[], Store],
        config: Config,
        replica: Replica,
        metrics: BeatMetrics,
        probes: ProbeState,
        *,
        monotonic: Callable[[], float],
    ) -> None:
        self._store, self._config, self._replica = store, config, replica
        self._metrics, self._probes, self._monotonic = metrics, probes, monotonic
        self.next_heartbeat = 0.0
        self.next_prune = 0.0
        # The entries last heartbeated and their digests, and the entries whose digests
        # the store took last (None: unknown, send them in full), so that an idle
        # heartbeat costs the same at any entry count and a change sends what changed.
        self._entries: Mapping[str, Entry] | None = None
        self._digests: Mapping[str, str] = {}
        self._stored: Mapping[str, Entry] | None = None

    def register(
        self, entries: Mapping[str, Entry], ran: Mapping[str, str | None] | None = None
    ) -> dict[str, EntryError]:
        """Register `entries`' definitions; say which ones the store had otherwise than
        this replica ran them (`ran`: digests, see `report_registration`). The next
        heartbeat sends the digests that differ from those the store last acknowledged.

        Return the entries the store refuses, each with its error: when registering fails
        with a StoreError that is not StoreUnavailable (the server refused a row, not the
        connection), the entries are registered by halves until each refusal is one
        entry's, so one entry the store cannot hold is put aside and the others run.
        """
        refused: dict[str, EntryError] = {}
        self._register(list(entries.values()), entries, refused, ran)
        return refused

    def _register(
        self,
        part: Sequence[Entry],
        entries: Mapping[str, Entry],
        refused: dict[str, EntryError],
        ran: Mapping[str, str | None] | None,
    ) -> None:
        try:
            registration = self._store().register(
                self._config.namespace, Definitions(part), self._replica
            )
        except StoreUnavailable:
            raise
        except StoreError as exc:
            if len(part) > 1:
                half = len(part) // 2
                self._register(part[:half], entries, refused, ran)
                self._register(part[half:], entries, refused, ran)
                return
            if not part:
                raise
            name = part[0].name
            refused[name] = EntryError(name, f"the store refuses to register it ({exc})")
            return
        report_registration(registration.changed, entries, ran)

    def heartbeat(self, entries: Mapping[str, Entry], *, interval: float) -> None:
        """Record now that this replica is alive with `entries`' digests: those that differ
        from the ones the store last acknowledged, in full the first time (or when the
        store lost them, or a heartbeat failed)."""
        digests = self._digests_of(entries)
        stored, self._stored = self._stored, None  # unknown if the store call fails
        changes = None
        if stored is not None:
            changes = NO_CHANGES if stored is entries else entry_changes(stored, entries)
        heartbeat(
            self._store(),
            self._config,
            self._replica,
            digests,
            self._metrics,
            interval=interval,
            stored=changes,
        )
        self._stored = entries
        self._probes.heartbeat_recorded()
        self.next_heartbeat = self._monotonic() + interval

    def _digests_of(self, entries: Mapping[str, Entry]) -> Mapping[str, str]:
        """`entries`' digests, the same object until beat runs other entries (a scheduler
        replaces its entries, never changes them in place)."""
        if entries is not self._entries:
            self._entries = entries
            self._digests = Digests(entries)
        return self._digests

    def run_due(
        self,
        now: float,
        store_now: datetime | None,
        entries: Mapping[str, Entry],
        *,
        heartbeat_interval: float,
        prune_interval: float,
    ) -> None:
        """The chores whose time has come at monotonic `now`; pruning needs the store's
        time (`store_now`), so it waits for the first tick that read it."""
        if now >= self.next_heartbeat:
            self.heartbeat(entries, interval=heartbeat_interval)
        if now >= self.next_prune and store_now is not None:
            started = self._monotonic()
            prune(self._store(), self._config, store_now)
            finished = self._monotonic()
            if finished - started >= PRUNE_BUDGET.total_seconds():
                prune_interval = min(prune_interval, BACKLOG_PRUNE_INTERVAL)
            self.next_prune = finished + prune_interval

    def forget_replica(self) -> None:
        """Remove this replica's heartbeat, if it sent one, so `safebeat status` drops it."""
        if not self.next_heartbeat:
            return
        try:
            self._store().forget_replica(self._config.namespace, self._replica)
        except StoreError as exc:
            logger.warning("safebeat: could not remove this replica's heartbeat: %s", exc)
