"""django-celery-beat's tables as a schedule source: what changed since the last look.

Every tick reads one value, `PeriodicTasks.last_update`, the marker django-celery-beat
moves whenever a `PeriodicTask` or a schedule is saved or deleted (admin, `save()`,
`PeriodicTasks.update_changed()`). Only when it moved does the source list the rows'
change stamps (`date_changed`, `enabled`, which schedule) and the schedules' values, and
load and compile the rows whose stamp differs from the one it compiled. Edits made with
`QuerySet.update()` move no marker; call `PeriodicTasks.update_changed()` after them, as
django-celery-beat asks too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from safebeat.config import Config
from safebeat.contrib.django.rows import ROW_FIELDS, compile_row
from safebeat.entries import Entry
from safebeat.errors import EntryError

logger = logging.getLogger("safebeat.contrib.django")

_UNSEEN = object()
#: Schedule kinds: (the PeriodicTask foreign key, the fields that decide its windows).
_SCHEDULES = {
    "interval": ("every", "period"),
    "crontab": ("minute", "hour", "day_of_week", "day_of_month", "month_of_year", "tz"),
    "solar": ("event", "latitude", "longitude"),
    "clocked": ("clocked_time",),
}


@dataclass(frozen=True)
class Row:
    """What the source knows of one row: its name, and its entry, error, or neither."""

    name: str
    stamp: tuple[Any, ...]
    entry: Entry | None = None
    error: EntryError | None = None
    expires: datetime | None = None
    one_off: bool = False


class PeriodicTaskSource:
    """Reads enabled `PeriodicTask` rows, compiling again only the rows that changed."""

    def __init__(self, app: Any, config: Config, clock: Callable[[], datetime]) -> None:
        self.app = app
        self.config = config
        self._clock = clock
        self._marker: object = _UNSEEN
        self._rows: dict[int, Row] = {}

    def changed(self) -> bool:
        """Whether the change marker moved since the last load (True before the first)."""
        from django_celery_beat.models import PeriodicTasks  # noqa: PLC0415

        marker = PeriodicTasks.objects.filter(ident=1).values_list("last_update", flat=True)
        return self._marker is _UNSEEN or self._marker != marker.first()

    def load(self) -> list[Row]:
        """Bring every row up to date; return the rows of enabled tasks (good and bad)."""
        from django_celery_beat.models import PeriodicTask, PeriodicTasks  # noqa: PLC0415

        marker = PeriodicTasks.objects.filter(ident=1).values_list("last_update", flat=True)
        self._marker = marker.first()  # read first: a change during the load shows next time
        listing = list(
            PeriodicTask.objects.values_list("pk", "date_changed", "enabled", *_foreign_keys())
        )
        schedules = self._schedule_values(listing)
        stamps = {
            pk: (changed_at, enabled, *_used(schedules, fks))
            for pk, changed_at, enabled, *fks in listing
        }
        stale = [
            pk for pk, stamp in stamps.items() if self._rows.get(pk, Row("", ())).stamp != stamp
        ]
        self._rows = {pk: row for pk, row in self._rows.items() if pk in stamps}
        if stale:
            self._compile(PeriodicTask, stale, stamps)
        return [row for row in self._rows.values() if row.entry or row.error]

    def _schedule_values(
        self, listing: list[tuple[Any, ...]]
    ) -> dict[tuple[str, int], tuple[Any, ...]]:
        from django.db.models import F, TextField  # noqa: PLC0415
        from django.db.models.functions import Cast  # noqa: PLC0415
        from django_celery_beat import models  # noqa: PLC0415

        values: dict[tuple[str, int], tuple[Any, ...]] = {}
        for index, (kind, fields) in enumerate(_SCHEDULES.items()):
            ids = {row[3 + index] for row in listing if row[3 + index] is not None}
            if not ids:
                continue
            model = getattr(models, f"{kind.capitalize()}Schedule")
            rows = model.objects.filter(pk__in=ids)
            if kind == "crontab":
                rows = rows.annotate(tz=Cast(F("timezone"), TextField()))
            for pk, *fields_values in rows.values_list("pk", *fields):
                values[(kind, pk)] = tuple(fields_values)
        return values

    def _compile(self, model: Any, pks: list[int], stamps: dict[int, tuple[Any, ...]]) -> None:
        from django.db.models import F, TextField  # noqa: PLC0415
        from django.db.models.functions import Cast  # noqa: PLC0415

        now = self._clock()
        rows = (
            model.objects.filter(pk__in=pks)
            .annotate(crontab_tz=Cast(F("crontab__timezone"), TextField()))
            .values(*ROW_FIELDS)
        )
        tz_aware = _tz_aware()
        for values in rows:
            pk, name = values["id"], str(values["name"])
            row = Row(name, stamps[pk])
            if values["enabled"] and not (values["one_off"] and values["total_run_count"]):
                try:
                    entry = compile_row(
                        values, app=self.app, config=self.config, now=now, row_time_zones=tz_aware
                    )
                except EntryError as error:
                    row = Row(name, stamps[pk], error=error)
                except Exception as exc:  # noqa: BLE001 - one row's surprise must not stop the rest
                    detail = " ".join(str(exc).split())
                    surprise = EntryError(
                        name,
                        f"cannot be compiled ({type(exc).__name__}: {detail}); "
                        "fix or disable the row",
                    )
                    row = Row(name, stamps[pk], error=surprise)
                else:
                    row = Row(
                        name,
                        stamps[pk],
                        entry=entry,
                        expires=values["expires"],
                        one_off=bool(values["one_off"]),
                    )
            self._rows[pk] = row

    def row_ids(self) -> dict[str, int]:
        """The primary key of each row the source knows, by name."""
        return {row.name: pk for pk, row in self._rows.items()}


def _foreign_keys() -> list[str]:
    return [f"{kind}_id" for kind in _SCHEDULES]


def _used(values: dict[tuple[str, int], tuple[Any, ...]], fks: list[Any]) -> tuple[Any, ...]:
    """The stamp of a row's schedule: which one it uses, and that schedule's values."""
    for kind, fk in zip(_SCHEDULES, fks, strict=True):
        if fk is not None:
            return (kind, fk, values.get((kind, fk)))
    return ()


def _tz_aware() -> bool:
    from django.conf import settings  # noqa: PLC0415

    return bool(getattr(settings, "DJANGO_CELERY_BEAT_TZ_AWARE", True))


def host_now() -> datetime:
    """This host's clock, aware UTC (when a row's expiry or a crontab is judged)."""
    return datetime.now(timezone.utc)
