"""`safebeat.contrib.django.DatabaseScheduler`: django-celery-beat's rows, each window once.

A drop-in for `django_celery_beat.schedulers:DatabaseScheduler`:

    celery -A proj beat -S safebeat.contrib.django.DatabaseScheduler

It runs the enabled `PeriodicTask` rows beside the app's `beat_schedule` (a row and a
setting of the same name: the row wins, so an admin edit is never overwritten by
settings, and nothing is written from settings into the table). Rows are read again
only when django-celery-beat's change marker moves, and only the rows that changed are
compiled again (see `safebeat.contrib.django.source`). After a window is published it
writes back the row's `last_run_at` (the window) and `total_run_count`, and nothing else;
a `one_off` row is disabled after its first window, and a row whose `expires` has passed
is disabled, as django-celery-beat's own scheduler does. Everything else — claims, windows,
replicas — is `safebeat.Scheduler`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from safebeat.beat.scheduler import Scheduler
from safebeat.contrib.django.source import PeriodicTaskSource, Row, host_now
from safebeat.entries import Entry, compile_schedule
from safebeat.errors import EntryError, StoreUnavailable
from safebeat.records import Claim
from safebeat.windows import BoundedRule, FilteredRule

logger = logging.getLogger("safebeat.contrib.django")


class DatabaseScheduler(Scheduler):
    """safebeat's scheduler reading django-celery-beat's `PeriodicTask` rows as entries."""

    #: PeriodicTask rows are this scheduler's entries added at run time (see docs/schedules.md).
    runs_runtime_entries = False
    #: Seconds between two looks at django-celery-beat's change marker.
    marker_interval = 1.0
    #: The clock that judges a row's `expires` and a crontab that never matches: this host's.
    clock: Callable[[], datetime] = staticmethod(host_now)

    def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
        self._rows: list[Row] = []
        self._row_ids: dict[str, int] = {}
        self._next_look = 0.0
        self._source: PeriodicTaskSource | None = None
        self._shadowed: set[str] = set()
        super().__init__(app, *args, **kwargs)

    @property
    def source(self) -> PeriodicTaskSource:
        if self._source is None:
            _ensure_django()
            self._source = PeriodicTaskSource(self.app, self.safebeat_config, self.clock)
        return self._source

    def compiled_schedule(self) -> tuple[dict[str, Entry], dict[str, EntryError]]:
        """The settings' entries and the rows' (a row wins over a setting of its name),
        the rows read first if they changed: beat starts with them all, each compiled
        once, and set up again it keeps running them. Rows that cannot be read now are
        read at the next tick (until then, those read before: none at the first start)."""
        try:
            self._read_rows()
        except StoreUnavailable as exc:
            logger.warning("safebeat: %s; read again at the next tick", exc)
        return self._merged()

    def refresh_entries(self) -> None:
        """Pick up edits of the rows, and rows whose `expires` has passed."""
        if time.monotonic() < self._next_look:
            if self._expired():
                self._apply()
        elif self._read_rows() or self._expired():
            self._apply()

    def _read_rows(self) -> bool:
        """Read the rows again if django-celery-beat's change marker moved; whether it did."""
        with _database_errors("read django-celery-beat's change marker"):
            changed = self.source.changed()
        if changed:
            with _database_errors("read django-celery-beat's periodic tasks"):
                self._rows = self.source.load()
                self._row_ids = self.source.row_ids()
        self._next_look = time.monotonic() + self.marker_interval
        return changed

    def _expired(self) -> bool:
        now = self.clock()
        return any(row.expires is not None and row.expires <= now for row in self._rows)

    def _apply(self) -> None:
        """Run the settings' entries and the rows' (a row wins over a setting of its name)."""
        entries, broken = self._merged()
        if _same(entries, self.entries) and broken.keys() == self.broken_entries.keys():
            return
        logger.info(
            "safebeat: schedule changed: %d entries (%d from periodic tasks), %d broken",
            len(entries),
            sum(1 for row in self._rows if row.entry is not None),
            len(broken),
        )
        self.use_entries(entries, broken)

    def _merged(self) -> tuple[dict[str, Entry], dict[str, EntryError]]:
        """The settings' entries compiled, and the rows' over them; the rows whose
        `expires` has passed are left out (and disabled)."""
        now = self.clock()
        expired = [row.name for row in self._rows if row.expires is not None and row.expires <= now]
        if expired:
            self._rows = [row for row in self._rows if row.name not in expired]
            self._disable_expired(expired, now)
        entries, broken = compile_schedule(
            self.schedule_source(), app_timezone=self.app.timezone, config=self.safebeat_config
        )
        for row in self._rows:
            custom = _custom_source(entries.get(row.name))
            if custom is not None:
                # django-celery-beat copied the setting into this row as a plain schedule:
                # running the row would run the class as something else.
                entries.pop(row.name)
                broken[row.name] = EntryError(
                    row.name,
                    f"its beat_schedule schedule is {custom}, which decides its own windows, "
                    "and a periodic task row of the same name, which would win, cannot hold "
                    "that rule (django-celery-beat copies settings into rows as plain "
                    "schedules); delete or rename the row to run the class",
                )
                continue
            if row.name in entries or row.name in broken:
                if row.name not in self._shadowed:
                    self._shadowed.add(row.name)
                    logger.warning(
                        "safebeat: periodic task %r is also defined in beat_schedule; "
                        "the database row is used",
                        row.name,
                    )
                entries.pop(row.name, None)
                broken.pop(row.name, None)
            if row.entry is not None:
                entries[row.name] = row.entry
            elif row.error is not None:
                broken[row.name] = row.error
        return entries, broken

    def _disable_expired(self, names: Sequence[str], now: datetime) -> None:
        """Turn off the rows `names`, whose `expires` has passed, as django-celery-beat does
        (the admin then shows them off); a failure only leaves them on, and unsent."""
        pks = [self._row_ids[name] for name in names if name in self._row_ids]
        if not pks:
            return
        from django.db import DatabaseError  # noqa: PLC0415

        from safebeat.contrib.django.writeback import disable_expired  # noqa: PLC0415

        try:
            if disable_expired(pks, now):
                logger.info("safebeat: periodic tasks %s expired and are disabled", sorted(names))
        except DatabaseError as exc:
            logger.warning(
                "safebeat: could not disable the expired periodic tasks %s: %s", sorted(names), exc
            )

    def published(self, claims: Sequence[Claim]) -> None:
        """Write back last_run_at and total_run_count of the rows whose windows went out."""
        rows = [(self._row_ids[c.entry], c) for c in claims if c.entry in self._row_ids]
        if not rows:
            return
        from django.db import DatabaseError  # noqa: PLC0415

        from safebeat.contrib.django.writeback import record_runs  # noqa: PLC0415

        one_off = {row.name for row in self._rows if row.one_off}
        try:
            record_runs(rows, one_off)
        except DatabaseError as exc:
            logger.warning(
                "safebeat: could not write back last_run_at/total_run_count of %s: %s",
                sorted({claim.entry for _, claim in rows}),
                exc,
            )


def _custom_source(entry: Entry | None) -> str | None:
    """The custom schedule class deciding `entry`'s windows, if one does."""
    if entry is None:
        return None
    rule = entry.rule.rule if isinstance(entry.rule, BoundedRule) else entry.rule
    return rule.source if isinstance(rule, FilteredRule) else None


def _same(new: dict[str, Entry], old: dict[str, Entry]) -> bool:
    return new.keys() == old.keys() and all(new[n].digest == old[n].digest for n in new)


@contextmanager
def _database_errors(action: str) -> Iterator[None]:
    """Turn Django's database errors into StoreUnavailable (beat backs off and retries)."""
    from django.db import DatabaseError, connections  # noqa: PLC0415

    try:
        yield
    except DatabaseError as exc:
        for connection in connections.all(initialized_only=True):
            if not connection.in_atomic_block:
                connection.close()  # reconnect on the next look
        raise StoreUnavailable(f"{action} failed: {exc}") from exc


def _ensure_django() -> None:
    from django.apps import apps  # noqa: PLC0415

    if not apps.ready:
        import django  # noqa: PLC0415

        django.setup()
