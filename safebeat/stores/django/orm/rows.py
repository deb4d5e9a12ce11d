"""What every part of the ORM store reads the same way: entry states and dispatch rows."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from safebeat.errors import StoreError
from safebeat.records import (
    DispatchRecord,
    EntryState,
    Outcome,
    Status,
)
from safebeat.stores.django import vendors
from safebeat.stores.django.base import DjangoDatabase
from safebeat.stores.django.setup import django_models

#: The values of an EntryState, in its order (`running_since` is computed).
STATE_COLUMNS = (
    "name",
    "anchor",
    "defined_at",
    "last_window",
    "digest",
    "schedule",
    "running_since",
    "paused",
    "paused_until",
    "pause_note",
    "queued_since",
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
    values = dict(zip(HISTORY_COLUMNS, row, strict=True))
    values["window"] = values.pop("window_at")
    values["status"] = Status(values["status"])
    if values["outcome"] is not None:
        values["outcome"] = Outcome(values["outcome"])
    return DispatchRecord(**values)


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
            Case,
            DateTimeField,
            F,
            OuterRef,
            Subquery,
            When,
        )
        from django.db.models.functions import Now  # noqa: PLC0415

        m = django_models(self.alias)
        running = (
            m.Dispatch.objects.using(self.alias)
            .filter(
                namespace=OuterRef("namespace"),
                entry=OuterRef("name"),
                started_at__isnull=False,
                finished_at__isnull=True,
                lease_until__gt=Now(),
            )
            .order_by("-started_at")
            .values("started_at")[:1]
        )
        # The newest dispatched window's claim time while no worker started it.
        queued = (
            m.Dispatch.objects.using(self.alias)
            .filter(
                namespace=OuterRef("namespace"),
                entry=OuterRef("name"),
                status__in=[Status.CLAIMED.value, Status.SENT.value],
            )
            .order_by("-window_at")
            .annotate(
                queued=Case(
                    When(started_at__isnull=True, then=F("claimed_at")),
                    default=None,
                    output_field=DateTimeField(),
                )
            )
            .values("queued")[:1]
        )
        rows = m.Entry.objects.using(self.alias).filter(namespace=namespace)
        if names is not None:
            rows = rows.filter(name__in=list(names))
        states: dict[str, EntryState] = {}
        annotated = rows.annotate(running_since=Subquery(running), queued_since=Subquery(queued))
        for values in annotated.values_list(*STATE_COLUMNS):
            state = dict(zip(STATE_COLUMNS, values, strict=True))
            states[state["name"]] = EntryState(**{**state, "paused": bool(state["paused"])})
        return states

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
