"""django-celery-beat's tables as a schedule source: what changed since the last look.

Every tick reads one value, `PeriodicTasks.last_update`, the marker django-celery-beat
moves whenever a `PeriodicTask` or a schedule is saved or deleted (admin, `save()`,
`PeriodicTasks.update_changed()`). Only when it moved does the source list the rows'
change stamps (`date_changed`, `enabled`, which schedule) and the schedules' values, and
load and compile the rows whose stamp differs from the one it compiled: by key when they
are few, else (and at the first load) in one read of every row. Edits made with
`QuerySet.update()` move no marker; call `PeriodicTasks.update_changed()` after them, as
django-celery-beat asks too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, NamedTuple

from safebeat.config import Config
from safebeat.contrib.django.rows import ROW_FIELDS, RowCache, compile_row
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


#: The names `_stamp` reads a row's schedule values by (the fields of `_SCHEDULES`).
_ROW_SCHEDULES = {
    kind: tuple("crontab_tz" if field == "tz" else f"{kind}__{field}" for field in fields)
    for kind, fields in _SCHEDULES.items()
}
#: Rows a load compiles again one by one at most (`IN` lists of `FETCH_CHUNK`); more, and
#: it reads every row, as at the first load.
FETCH_ALL = 2_000
FETCH_CHUNK = 500
#: Rows fetched at a time when every row is read.
READ_CHUNK = 2_000


class Row(NamedTuple):
    """What the source knows of one row: its name, and its entry, error, or neither (a
    tuple: one of 100,000 is made in a fraction of a frozen dataclass's time)."""

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
        from django_celery_beat.models import PeriodicTasks  # noqa: PLC0415

        marker = PeriodicTasks.objects.filter(ident=1).values_list("last_update", flat=True)
        self._marker = marker.first()  # read first: a change during the load shows next time
        try:
            return self._load()
        except BaseException:
            self._marker = _UNSEEN  # not brought up to date: the next look loads again
            raise

    def _load(self) -> list[Row]:
        from django_celery_beat.models import PeriodicTask  # noqa: PLC0415

        if not self._rows:  # nothing to compare with: every row in one read
            self._compile(_values(PeriodicTask.objects.all()), everything=True)
            return self._known()
        listing = list(
            PeriodicTask.objects.annotate(changed=_text("date_changed")).values_list(
                "pk", "changed", "enabled", *_foreign_keys()
            )
        )
        schedules = self._schedule_values(listing)
        stamps = {
            pk: (changed_at, enabled, *_used(schedules, fks))
            for pk, changed_at, enabled, *fks in listing
        }
        stale = [
            pk
            for pk, stamp in stamps.items()
            if (row := self._rows.get(pk)) is None or row.stamp != stamp
        ]
        self._rows = {pk: row for pk, row in self._rows.items() if pk in stamps}
        if len(stale) > FETCH_ALL:  # many rows (a shared schedule edited): read them all
            self._compile(_values(PeriodicTask.objects.all()), everything=True)
        else:
            for chunk in _chunks(stale):
                self._compile(_values(PeriodicTask.objects.filter(pk__in=chunk)))
        return self._known()

    def _known(self) -> list[Row]:
        return [row for row in self._rows.values() if row.entry or row.error]

    def _schedule_values(
        self, listing: list[tuple[Any, ...]]
    ) -> dict[tuple[str, int], tuple[Any, ...]]:
        from django_celery_beat import models  # noqa: PLC0415

        values: dict[tuple[str, int], tuple[Any, ...]] = {}
        for index, (kind, fields) in enumerate(_SCHEDULES.items()):
            ids = sorted({row[3 + index] for row in listing if row[3 + index] is not None})
            model = getattr(models, f"{kind.capitalize()}Schedule")
            for chunk in _chunks(ids):
                rows = model.objects.filter(pk__in=chunk)
                if kind == "crontab":
                    rows = rows.annotate(tz=_text("timezone"))
                for pk, *fields_values in rows.values_list("pk", *fields):
                    values[(kind, pk)] = tuple(fields_values)
        return values

    def _compile(self, rows: Iterable[dict[str, Any]], *, everything: bool = False) -> None:
        """Compile the rows read whose stamp is not the one compiled; with `everything`,
        `rows` are all the rows, and a row not among them is gone."""
        now = self._clock()
        tz_aware = _tz_aware()
        cache = RowCache()
        known, self._rows = self._rows, {} if everything else self._rows
        for values in rows:
            pk, stamp = values["id"], _stamp(values)
            row = known.get(pk)
            if row is None or row.stamp != stamp:
                row = self._row(values, stamp, now, tz_aware, cache)
            self._rows[pk] = row

    def _row(
        self,
        values: dict[str, Any],
        stamp: tuple[Any, ...],
        now: datetime,
        tz_aware: bool,
        cache: RowCache,
    ) -> Row:
        name = str(values["name"])
        if not values["enabled"] or (values["one_off"] and values["total_run_count"]):
            return Row(name, stamp)
        try:
            entry = compile_row(
                values,
                app=self.app,
                config=self.config,
                now=now,
                row_time_zones=tz_aware,
                cache=cache,
            )
        except EntryError as error:
            return Row(name, stamp, error=error)
        except Exception as exc:  # noqa: BLE001 - one row's surprise must not stop the rest
            detail = " ".join(str(exc).split())
            surprise = EntryError(
                name,
                f"cannot be compiled ({type(exc).__name__}: {detail}); fix or disable the row",
            )
            return Row(name, stamp, error=surprise)
        return Row(
            name, stamp, entry=entry, expires=values["expires"], one_off=bool(values["one_off"])
        )

    def row_ids(self) -> dict[str, int]:
        """The primary key of each row the source knows, by name."""
        return {row.name: pk for pk, row in self._rows.items()}


def _foreign_keys() -> list[str]:
    return [f"{kind}_id" for kind in _SCHEDULES]


def _text(field: str) -> Any:
    """The column `field` as text: a time zone as its name, a time as the database writes
    it (a stamp to compare, not a datetime parsed for each of 100,000 rows)."""
    from django.db.models import F, TextField  # noqa: PLC0415
    from django.db.models.functions import Cast  # noqa: PLC0415

    return Cast(F(field), TextField())


def _values(rows: Any) -> Iterable[dict[str, Any]]:
    """What `compile_row` reads of each row (`ROW_FIELDS`), and the row's stamp's fields."""
    values: Iterable[dict[str, Any]] = (
        rows.annotate(crontab_tz=_text("crontab__timezone"), changed=_text("date_changed"))
        .values(*ROW_FIELDS, "changed", *_foreign_keys())
        .iterator(chunk_size=READ_CHUNK)  # not 100,000 dicts at once
    )
    return values


def _stamp(values: dict[str, Any]) -> tuple[Any, ...]:
    """A row's stamp from its values, as `load` lists it: when it was last saved, whether
    it is enabled, which schedule it uses and that schedule's values."""
    for kind, fields in _ROW_SCHEDULES.items():
        fk = values[f"{kind}_id"]
        if fk is not None:
            return (values["changed"], values["enabled"], kind, fk, tuple(map(values.get, fields)))
    return (values["changed"], values["enabled"])


def _chunks(pks: Sequence[Any]) -> Iterator[Sequence[Any]]:
    """`pks` in lists short enough for one `IN (...)` on every database (SQLite's)."""
    for start in range(0, len(pks), FETCH_CHUNK):
        yield pks[start : start + FETCH_CHUNK]


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
