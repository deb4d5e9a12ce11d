"""What every part of the ORM store reads the same way: entry states and dispatch rows."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from safebeat.errors import StoreError
from safebeat.records import (
    DispatchRecord,
    EntryState,
    Outcome,
    Status,
)
from safebeat.stores.decoding import (
    DECODE_ERRORS,
    STATE_COLUMNS,
    Unreadable,
    problem_of,
    record_of,
    state_of,
    state_of_row,
    unconverted,
    unreadable_record,
    unreadable_state,
)
from safebeat.stores.django import vendors
from safebeat.stores.django.base import DjangoDatabase
from safebeat.stores.django.setup import django_models

#: Whether the row holds an instant in the nullable instant columns: Django on SQLite reads
#: text it cannot parse as None, so a row with a value there and None read is unreadable.
#: The condition of the partial index safebeat_dispatch_dispatched, as its SQL says it.
DISPATCHED = f"status IN ('{Status.CLAIMED.value}', '{Status.SENT.value}')"

HELD_COLUMNS = ("last_window_held", "paused_until_held")
LOADED_COLUMNS = (*STATE_COLUMNS, *HELD_COLUMNS)
#: What the entries' query reads: the entry's own columns, the ids of the rows its facts
#: are read from (its live run, its newest dispatched window), and the held flags.
FOUND_COLUMNS = (*STATE_COLUMNS[:9], "run_id", "dispatched_id", *HELD_COLUMNS)
#: The columns of a dispatch row the facts are made of, and how many ids one query reads.
FACT_COLUMNS = ("id", "window_at", "claimed_at", "started_at", "lease_until", "task_id")
FACT_SLICE = 1000
RUN_FACTS = ("window_at", "started_at", "lease_until", "task_id")
DISPATCHED_FACTS = ("window_at", "claimed_at", "started_at")

HISTORY_COLUMNS = (
    "id",
    "entry",
    "window_at",
    "status",
    "task_id",
    "task_name",
    "reason",
    "skipped_from",
    "skipped_count",
    "replica",
    "host",
    "pid",
    "claimed_at",
    "sent_at",
    "attempts",
    "error",
    "started_at",
    "finished_at",
    "outcome",
    "runtime",
    "worker",
    "retries",
    "runs",
    "duplicates",
    "lease_until",
)


def _record(row: Sequence[Any]) -> DispatchRecord:
    """The history record of a row, or an unreadable one if Django could not convert a
    value (`one_by_one`) or a value is not an instant where one belongs (a zero date on
    MySQL/MariaDB reads as None)."""
    problem = unconverted(HISTORY_COLUMNS, row)
    if problem is not None:
        return unreadable_record(row[0], str(row[1]), problem)
    return record_of(row[0], str(row[1]), lambda: _decoded_record(row))


def _decoded_record(row: Sequence[Any]) -> DispatchRecord:
    values = dict(zip(HISTORY_COLUMNS, row, strict=True))
    values["window"] = values.pop("window_at")
    values["status"] = Status(values["status"])
    if values["outcome"] is not None:
        values["outcome"] = Outcome(values["outcome"])
    _require_instants(values, "window", "claimed_at")
    return DispatchRecord(**values)


def _state(row: Sequence[Any]) -> EntryState:
    """The state of a row (LOADED_COLUMNS), or an unreadable one as `_record`, also when a
    nullable instant column holds a value Django read as None."""

    def decode() -> EntryState:
        values = dict(zip(LOADED_COLUMNS, row, strict=True))
        _require_instants(values, "anchor", "defined_at")
        for held in HELD_COLUMNS:
            column = held.removesuffix("_held")
            if values.pop(held) and values[column] is None:
                raise TypeError(f"its {column} holds a value Django cannot read as an instant")
        return state_of_row((*row[:6], bool(values["paused"]), *row[7:16]))

    problem = unconverted(LOADED_COLUMNS, row)
    if problem is not None:
        return unreadable_state(str(row[0]), problem)
    return state_of(str(row[0]), decode)


def _with_facts(found: Sequence[Any], facts: Mapping[int, Mapping[str, Any]]) -> tuple[Any, ...]:
    """A row of `FOUND_COLUMNS` as one of `LOADED_COLUMNS`: its ids replaced by the fact
    columns of their rows (None where the entry has no such row)."""
    run, newest = facts.get(found[9], {}), facts.get(found[10], {})
    return (
        *found[:9],
        *(run.get(column) for column in RUN_FACTS),
        *(newest.get(column) for column in DISPATCHED_FACTS),
        *found[11:],
    )


def _require_instants(values: Mapping[str, Any], *names: str) -> None:
    for name in names:
        if not isinstance(values[name], datetime):
            raise TypeError(f"its {name} holds {values[name]!r}, not an instant")


def one_by_one(rows: Any, key: str, columns: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    """The `columns` of each of `rows` (a queryset), read row by row: after one row held a
    value Django could not convert, so that it fails alone. A row that fails again comes
    as its `key` and, in every other column, an `Unreadable` saying what failed."""
    for value in rows.values_list(key, flat=True):
        try:
            [found] = rows.filter(**{key: value}).values_list(*columns)
        except DECODE_ERRORS as exc:
            failed = Unreadable(problem_of(exc))
            found = tuple(value if column == key else failed for column in columns)
        yield found


class DjangoOrmRows(DjangoDatabase):
    """The Django store's alias, with the ORM reads and the write transaction the other
    parts share."""

    @contextmanager
    def _write(self, action: str) -> Iterator[Any]:
        """This thread's connection, inside the boundary and one write transaction bounded
        by the lock timeout (see `vendors.write`)."""
        with (
            self._boundary(action) as connection,
            vendors.write(connection, bound=self._lock_timeout),
        ):
            yield connection

    def _load(self, namespace: str, names: Collection[str] | None) -> dict[str, EntryState]:
        from django.db.models import (  # noqa: PLC0415
            BooleanField,
            ExpressionWrapper,
            OuterRef,
            Q,
            Subquery,
        )
        from django.db.models.expressions import RawSQL  # noqa: PLC0415
        from django.db.models.functions import Now  # noqa: PLC0415

        m = django_models(self.alias)
        # The facts of the entry's rows (safebeat.facts), found by id, then read by
        # `_facts`: its newest run holding a live lease (the newest start of
        # safebeat_dispatch_running), and its newest dispatched window, on SQLite one probe
        # of safebeat_dispatch_dispatched past any number of newer skipped rows. That
        # condition is written out, not `status__in`: SQLite matches a partial index only
        # to literal values, never to bound parameters. (MySQL/MariaDB have no partial
        # index: there the unique key is walked back past the skipped rows.) One probe each
        # for an id, not one per column: a column each tripled what a tick read.
        rows_of = m.Dispatch.objects.using(self.alias).filter(
            namespace=OuterRef("namespace"), entry=OuterRef("name")
        )
        running = rows_of.filter(
            started_at__isnull=False, finished_at__isnull=True, lease_until__gt=Now()
        ).order_by("-started_at")
        dispatched = rows_of.filter(
            RawSQL(DISPATCHED, (), output_field=BooleanField()),  # noqa: S611  # a constant
        ).order_by("-window_at")
        rows = m.Entry.objects.using(self.alias).filter(namespace=namespace)
        if names is not None:
            rows = rows.filter(name__in=list(names))
        annotated = rows.annotate(
            run_id=Subquery(running.values("id")[:1]),
            dispatched_id=Subquery(dispatched.values("id")[:1]),
            **{
                held: ExpressionWrapper(
                    Q(**{f"{held.removesuffix('_held')}__isnull": False}),
                    output_field=BooleanField(),
                )
                for held in HELD_COLUMNS
            },
        )
        try:
            found = list(annotated.values_list(*FOUND_COLUMNS))
        except DECODE_ERRORS:  # a row Django cannot convert: it alone is unreadable
            found = list(one_by_one(annotated, "name", FOUND_COLUMNS))
        facts = self._facts({i for values in found for i in values[9:11] if type(i) is int})
        return {values[0]: _state(_with_facts(values, facts)) for values in found}

    def _facts(self, ids: Collection[int]) -> dict[int, dict[str, Any]]:
        """The fact columns (`FACT_COLUMNS`) of the dispatch rows `ids`, by id, a slice of
        ids per query; a row Django cannot convert holds `Unreadable` values."""
        m = django_models(self.alias)
        ordered = sorted(ids)
        facts: dict[int, dict[str, Any]] = {}
        for start in range(0, len(ordered), FACT_SLICE):
            query = m.Dispatch.objects.using(self.alias).filter(
                id__in=ordered[start : start + FACT_SLICE]
            )
            try:
                read = list(query.values_list(*FACT_COLUMNS))
            except DECODE_ERRORS:  # a row Django cannot convert: its entry is unreadable
                read = list(one_by_one(query, "id", FACT_COLUMNS))
            facts.update((row[0], dict(zip(FACT_COLUMNS, row, strict=True))) for row in read)
        return facts

    def _check_lengths(self, namespace: str, names: Sequence[str]) -> None:
        """MySQL keys are bounded varchars, and INSERT IGNORE would truncate: refuse instead."""
        from django.db import connections  # noqa: PLC0415

        if connections[self.alias].vendor != "mysql":
            return
        m = django_models(self.alias)
        if len(namespace) > m.NAMESPACE_LENGTH:
            raise StoreError(
                f"Django store {self.display_url}: namespace {namespace[:40]!r}... is longer "
                f"than {m.NAMESPACE_LENGTH} characters, the most MySQL/MariaDB hold"
            )
        for name in names:
            if len(name) > m.ENTRY_LENGTH:
                raise StoreError(
                    f"Django store {self.display_url}: entry {name[:40]!r}... is longer than "
                    f"{m.ENTRY_LENGTH} characters, the most MySQL/MariaDB hold; rename it"
                )
