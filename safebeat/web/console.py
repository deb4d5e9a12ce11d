"""What each page of the web console shows, read and done through the CLI's operations.

One `Console` per app: the store is opened on first use and shared by every request
under a lock (a store holds one connection), the namespace is chosen as the CLI chooses
it, and the schedule is compiled from the Celery app on each request, as `safebeat
status -A` does, so django-celery-beat rows edited meanwhile show up.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from safebeat.cli.context import Options, choose_namespace, open_store
from safebeat.config import Config
from safebeat.display import lag
from safebeat.entries import Entry
from safebeat.entries.app_entries import Schedule
from safebeat.errors import EntryError, SafebeatError, UnreadableState
from safebeat.ops import actions, doctor, operations
from safebeat.ops.overview import (
    EntryStatus,
    ReplicaStatus,
    empty_namespace,
    entry_status,
    entry_statuses,
    replica_statuses,
    status_rows,
)
from safebeat.stores import Store
from safebeat.stores.protocols import AuditRecord, DispatchRecord, Outcome, Status
from safebeat.web.words import in_words

log = logging.getLogger("safebeat.web")

#: A window sent later than this after its instant, or still undecided this long after
#: it, marks its entry "late".
LATE_AFTER = timedelta(seconds=60)
#: History rows an entry's page shows (and draws) unless asked for another number.
HISTORY_ROWS = 50
#: Operator actions the audit page shows unless asked for another number.
AUDIT_ROWS = 100
#: The console's errors name the fields of its forms, not the CLI's options.
FORM_FIELDS = operations.Fields(until="until", start="start", end="end")


@dataclass(frozen=True)
class EntryRow:
    """One line of the entries page: the status, the schedule in words, and the red marks."""

    status: EntryStatus
    words: str
    late: bool
    failing: bool


@dataclass(frozen=True)
class EntriesPage:
    """The entries page: a row per registered entry, broken entries, or why there is none."""

    rows: list[EntryRow]
    broken: dict[str, EntryError]
    empty: str | None


@dataclass(frozen=True)
class EntryPage:
    """An entry's page: its row, its newest windows, and whether it can be triggered here."""

    row: EntryRow
    history: list[DispatchRecord]
    runnable: Entry | None
    not_runnable: str | None
    now: datetime


def is_late(status: EntryStatus, now: datetime) -> bool:
    """Whether the entry's last window was sent late, or a due window is still undecided."""
    if status.lag is not None and status.lag > LATE_AFTER:
        return True
    overdue = status.overdue_window
    return not status.paused and overdue is not None and now - overdue > LATE_AFTER


def row_of(status: EntryStatus, now: datetime) -> EntryRow:
    return EntryRow(
        status=status,
        words=in_words(status.schedule),
        late=is_late(status, now),
        failing=status.last_outcome is Outcome.FAILURE,
    )


class Console:
    """The store, namespace and Celery app behind one console; every page's data."""

    def __init__(self, options: Options, *, read_only: bool = False) -> None:
        self.options = options
        self.read_only = read_only
        self._lock = threading.Lock()
        self._opened: tuple[Config, Store] | None = None

    @property
    def app(self) -> Any | None:
        return self.options.app

    def open(self) -> tuple[Config, Store]:
        """The settings (namespace chosen) and the store; opened once, on first use.

        Raise NoStore or NamespaceUnknown (safebeat.cli.context) as the CLI would.
        """
        with self._lock:
            if self._opened is None:
                config, store = open_store(self.options)
                try:
                    config = choose_namespace(self.options, config, store, log.info)
                except Exception:
                    store.close()
                    raise
                self._opened = config, store
            return self._opened

    def where(self) -> str:
        """The store (without its password) and namespace shown, once opened."""
        if self._opened is None:
            return ""
        config, store = self._opened
        return f"{store.display_url}, namespace {config.namespace!r}"

    def close(self) -> None:
        with self._lock:
            if self._opened is not None:
                self._opened[1].close()
                self._opened = None

    @contextmanager
    def using(self) -> Iterator[tuple[Config, Store]]:
        """The settings and the store, held by this request alone."""
        config, store = self.open()
        with self._lock:
            yield config, store

    def schedule(self, config: Config, store: Store) -> Schedule | None:
        """The app's schedule with the entries added at run time in `store` (None without -A)."""
        return self.options.schedule(config, store)

    def entries(self) -> EntriesPage:
        """Every registered entry, the app's entries beat skips as broken, and what to say
        when there is none (`safebeat status`'s words: which namespaces the store holds)."""
        with self.using() as (config, store):
            schedule = self.schedule(config, store)
            statuses = entry_statuses(
                store, config.namespace, None if schedule is None else schedule.entries
            )
            now = store.clock()
            empty = None if statuses else empty_namespace(store, config.namespace)
        broken: dict[str, EntryError] = {} if schedule is None else dict(schedule.broken)
        for status in statuses:  # put aside by beat, listed as `safebeat status` lists it
            if status.unreadable is not None:
                broken[status.name] = UnreadableState(status.name, status.unreadable)
            elif status.uncomputable is not None:
                broken[status.name] = EntryError(
                    status.name, f"its windows cannot be computed: {status.uncomputable}"
                )
        return EntriesPage([row_of(s, now) for s in statuses], broken, empty)

    def entry(self, name: str, limit: int = HISTORY_ROWS) -> EntryPage | None:
        """The page of entry `name`, or None if it is not registered in the namespace."""
        with self.using() as (config, store):
            state = store.states(config.namespace).get(name)
            if state is None:
                return None
            schedule = self.schedule(config, store)
            compiled = None if schedule is None else schedule.entries.get(name)
            now = store.clock()
            # The status reads as deep as `safebeat status` does whatever the page lists: the
            # windows skipped ahead are among those rows, and the next window is after them.
            recent = status_rows(store, config.namespace, state, now)
            rows = (
                recent
                if len(recent) >= limit
                else store.history(config.namespace, name, limit=max(limit, 1))
            )
        runnable, reason = self._runnable(schedule, name, config)
        return EntryPage(
            row_of(entry_status(state, recent, compiled, now), now),
            rows[: max(limit, 1)],
            runnable,
            reason,
            now,
        )

    def _runnable(
        self, schedule: Schedule | None, name: str, config: Config
    ) -> tuple[Entry | None, str | None]:
        if schedule is None:
            return (
                None,
                "trigger, backfill and skip-next need the Celery app: start the console with -A",
            )
        try:
            return operations.scheduled_entry(schedule, name, config.namespace), None
        except SafebeatError as exc:  # a broken entry, or one the app lacks: shown as why
            return None, str(exc)

    def replicas(self) -> list[ReplicaStatus]:
        with self.using() as (config, store):
            return replica_statuses(store, config.namespace)

    def findings(self) -> list[doctor.Finding]:
        """The doctor's findings, as `safebeat doctor` reports them."""
        with self.using() as (config, store):
            schedule = self.schedule(config, store)
            return doctor.run_checks(
                doctor.Context(
                    store=store,
                    config=config,
                    app=self.app,
                    entries=None if schedule is None else schedule.entries,
                    broken=None if schedule is None else schedule.broken,
                )
            )

    def audit(self, entry: str | None = None, limit: int = AUDIT_ROWS) -> list[AuditRecord]:
        """The newest operator actions, of one entry if given."""
        with self.using() as (config, store):
            return store.audit(config.namespace, entry, limit=limit)

    def act(
        self, action: actions.Action, name: str, values: Mapping[str, Any], *, actor: str
    ) -> actions.Result:
        """Run `action` on entry `name` as `actor`, with the values of its form."""
        with self.using() as (config, store):
            return action.run(self._target(config, store, name, actor), values)

    def preview(
        self, action: actions.Action, name: str, values: Mapping[str, Any]
    ) -> list[datetime]:
        """The windows `action` would cover (a backfill's; those with a row are left alone)."""
        assert action.preview is not None  # noqa: S101 - asked for actions that have one
        with self.using() as (config, store):
            return action.preview(self._target(config, store, name, ""), values)

    def _target(self, config: Config, store: Store, name: str, actor: str) -> actions.Target:
        return actions.Target(
            store,
            config.namespace,
            name,
            actor,
            app=self.app,
            compile=lambda: self._entry_to_run(config, store, name),
            fields=FORM_FIELDS,
        )

    def _entry_to_run(self, config: Config, store: Store, name: str) -> Entry:
        schedule = self.schedule(config, store)
        if schedule is None:
            raise operations.OperationError(
                "trigger, backfill and skip-next need the Celery app: start the console with -A"
            )
        return operations.scheduled_entry(schedule, name, config.namespace)


def window_kind(record: DispatchRecord, hooked: bool) -> str:
    """How a window went, for the strip: on-time, late, skipped, failed or never-ran.

    `hooked`: whether the worker hook records executions for this entry (some row has a
    start); only then does a sent window without a start count as never ran.
    """
    if record.status is Status.SKIPPED:
        return "skipped"
    if record.status is Status.FAILED or record.outcome is Outcome.FAILURE:
        return "failed"
    if record.status is Status.CLAIMED or (hooked and record.started_at is None):
        return "never-ran"
    delay = lag(record)
    return "late" if delay is not None and delay > LATE_AFTER else "on-time"
