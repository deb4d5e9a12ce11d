"""What every part of the ORM store reads the same way: entry states and dispatch rows."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
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
from safebeat.stores.sqlfiles import load_queries

#: Whether the row holds an instant in the nullable instant columns: Django on SQLite reads
#: text it cannot parse as None, so a row with a value there and None read is unreadable.
HELD_COLUMNS = ("last_window_held", "paused_until_held")
LOADED_COLUMNS = (*STATE_COLUMNS, *HELD_COLUMNS)
#: The columns of the dispatch rows joined as `r` (the live run) and `q` (the newest
#: dispatched window) that the entries' query reads as the facts of STATE_COLUMNS.
FACT_COLUMNS = (
    ("r", "window_at"),
    ("r", "started_at"),
    ("r", "lease_until"),
    ("r", "task_id"),
    ("q", "window_at"),
    ("q", "claimed_at"),
    ("q", "started_at"),
)

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


#: The joins of an entry `e`'s facts, as the `postgresql://` store (LATERAL, whole rows)
#: and the `sqlite://` store (each row by its id: MariaDB has no LATERAL) write them, by
#: vendor: joined to the ORM's query of the entries, its table for `e` and Django's `Now()`
#: for `:now` (PostgreSQL's reads `clock_timestamp()`, the tick's clock). On SQLite the
#: newest dispatched row is one probe of the partial index safebeat_dispatch_dispatched;
#: MySQL/MariaDB have no partial index, so there the unique key is walked back past the
#: skipped rows.
FACT_JOINS = {
    backend: load_queries("safebeat.stores", f"{backend}/queries.sql")["entry_facts"]
    for backend in ("postgres", "sqlite")
}
_ENTRY = re.compile(r"\be\.")


def _require_instants(values: Mapping[str, Any], *names: str) -> None:
    for name in names:
        if not isinstance(values[name], datetime):
            raise TypeError(f"its {name} holds {values[name]!r}, not an instant")


def one_by_one(
    rows: Any,
    key: str,
    columns: Sequence[str],
    read: Callable[[Any], list[tuple[Any, ...]]] | None = None,
) -> Iterator[tuple[Any, ...]]:
    """The `columns` of each of `rows` (a queryset), read row by row (by `read`, else
    `values_list`): after one row held a value Django could not convert, so that it fails
    alone. A row that fails again comes as its `key` and, in every other column, an
    `Unreadable` saying what failed."""
    for value in rows.values_list(key, flat=True):
        one = rows.filter(**{key: value})
        try:
            [found] = read(one) if read is not None else one.values_list(*columns)
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
        from django.db import connections  # noqa: PLC0415
        from django.db.models import BooleanField, ExpressionWrapper, Q  # noqa: PLC0415
        from django.db.models.expressions import RawSQL  # noqa: PLC0415

        m = django_models(self.alias)
        quote = connections[self.alias].ops.quote_name
        rows = m.Entry.objects.using(self.alias).filter(namespace=namespace)
        if names is not None:
            if not names:  # Django compiles no statement for `IN ()`
                return {}
            rows = rows.filter(name__in=list(names))
        # The facts (safebeat.facts) are columns of the rows `_read` joins, converted as
        # the model's own columns are.
        facts = {
            column: RawSQL(  # noqa: S611  # constant names
                f"{quote(alias)}.{quote(field)}", (), output_field=m.Dispatch._meta.get_field(field)
            )
            for column, (alias, field) in zip(STATE_COLUMNS[9:], FACT_COLUMNS, strict=True)
        }
        annotated = rows.annotate(
            **facts,
            **{
                held: ExpressionWrapper(
                    Q(**{f"{held.removesuffix('_held')}__isnull": False}),
                    output_field=BooleanField(),
                )
                for held in HELD_COLUMNS
            },
        ).values_list(*LOADED_COLUMNS)
        try:
            found = self._read(annotated)
        except DECODE_ERRORS:  # a row Django cannot convert: it alone is unreadable
            found = list(one_by_one(annotated, "name", LOADED_COLUMNS, self._read))
        return {values[0]: _state(values) for values in found}

    def _read(self, rows: Any) -> list[tuple[Any, ...]]:
        """The rows of `rows` (a `values_list` of `LOADED_COLUMNS` of entries), with the
        dispatch rows of their facts joined after its FROM: one statement, each fact a
        bounded index probe, whatever the entries' history (see `FACT_JOINS`)."""
        from django.db import connections  # noqa: PLC0415
        from django.db.models.functions import Now  # noqa: PLC0415

        connection = connections[self.alias]
        compiler = rows.query.get_compiler(using=self.alias)
        sql, params = compiler.as_sql()
        selected = [*rows.query.values_select, *rows.query.annotation_select]
        if tuple(selected) != LOADED_COLUMNS:  # the order Django writes them in
            raise StoreError(f"Django store {self.display_url}: the states' query reads {selected}")
        now, _ = compiler.compile(Now())
        joins = FACT_JOINS["postgres" if connection.vendor == "postgresql" else "sqlite"]
        table = connection.ops.quote_name(rows.model._meta.db_table)
        if sql.count(f" FROM {table} ") != 1:
            raise StoreError(f"Django store {self.display_url}: the states' query is {sql!r}")
        joins = _ENTRY.sub(f"{table}.", joins).replace(":now", now)
        sql = sql.replace(f" FROM {table} ", f" FROM {table} {joins} ")
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            found = cursor.fetchall()
        return [tuple(values) for values in compiler.results_iter(results=[found])]

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
