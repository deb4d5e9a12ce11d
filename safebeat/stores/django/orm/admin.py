"""The ORM store's reads and changes for operators: states, history, pauses, windows written
by hand, entries added at run time."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from safebeat import records
from safebeat.facts import WindowRow
from safebeat.identity import Replica
from safebeat.stores.administering import AdminAdapter
from safebeat.stores.decoding import DECODE_ERRORS, audit_record
from safebeat.stores.django import vendors
from safebeat.stores.django.orm.rows import HISTORY_COLUMNS, DjangoOrmRows, _record, one_by_one
from safebeat.stores.django.setup import django_models
from safebeat.stores.sql_common import audit_columns, ids_in_order, replica_columns, window_rows

#: The counter that moves with every change to the entries added at run time.
RUNTIME_COUNTER = "runtime_entries"


class DjangoOrmAdmin(AdminAdapter, DjangoOrmRows):
    """`AdminStore` with Django's ORM (`schema_version` and `checks` are `DjangoDatabase`'s)."""

    def states(self, namespace: str) -> dict[str, records.EntryState]:
        with self._boundary("load entry states"):
            return self._load(namespace, None)

    def state(self, namespace: str, entry: str) -> records.EntryState | None:
        with self._boundary("load an entry's state"):
            return self._load(namespace, [entry]).get(entry)

    def replicas(self, namespace: str) -> list[records.ReplicaRecord]:
        m = django_models(self.alias)
        with self._boundary("list replicas"):
            rows = list(
                m.Replica.objects.using(self.alias)
                .filter(namespace=namespace)
                .order_by("-heartbeat_at")
                .values_list(
                    "replica", "host", "pid", "version", "started_at", "heartbeat_at", "definitions"
                )
            )
        return [records.ReplicaRecord(*row) for row in rows]

    def heartbeats(self, namespace: str) -> list[datetime]:
        m = django_models(self.alias)
        with self._boundary("list heartbeats"):
            found = (
                m.Replica.objects.using(self.alias)
                .filter(namespace=namespace)
                .order_by("-heartbeat_at")
                .values_list("heartbeat_at", flat=True)
            )
            return list(found)

    def namespaces(self) -> list[str]:
        m = django_models(self.alias)
        with self._boundary("list namespaces"):
            found = m.Entry.objects.using(self.alias).order_by().values_list("namespace", flat=True)
            return sorted({str(name) for name in found.distinct()})

    def _history(
        self, namespace: str, entry: str | None, limit: int
    ) -> list[records.DispatchRecord]:
        m = django_models(self.alias)
        with self._boundary("read history"):
            rows = m.Dispatch.objects.using(self.alias).filter(namespace=namespace)
            if entry is not None:
                rows = rows.filter(entry=entry)
            ordered = rows.order_by("-window_at", "-id")
            try:
                values = list(ordered.values_list(*HISTORY_COLUMNS)[:limit])
            except DECODE_ERRORS:  # a row Django cannot convert: it alone is unreadable
                ids = list(ordered.values_list("id", flat=True)[:limit])
                by_id = {
                    v[0]: v for v in one_by_one(rows.filter(id__in=ids), "id", HISTORY_COLUMNS)
                }
                values = [by_id[i] for i in ids]
        return [_record(row) for row in values]

    def _store_pause(self, namespace: str, entry: str, pause: records.Pause) -> bool:
        m = django_models(self.alias)
        with self._write(pause.action):
            # MySQL counts the rows matched, not changed (Django connects with FOUND_ROWS).
            updated = (
                m.Entry.objects.using(self.alias)
                .filter(namespace=namespace, name=entry)
                .update(paused=pause.paused, paused_until=pause.until, pause_note=pause.note)
            )
        return bool(updated)

    def _append_audit(self, namespace: str, event: records.AuditEvent) -> tuple[int, datetime]:
        m = django_models(self.alias)
        columns = audit_columns(namespace, event)
        with self._boundary("record an operator action") as connection, vendors.write(connection):
            now = vendors.clock(connection)
            row = m.Audit.objects.using(self.alias).create(
                **{**columns, "windows": [w.isoformat() for w in event.windows]}, at=now
            )
        return int(row.id), now

    def _audit(self, namespace: str, entry: str | None, limit: int) -> list[records.AuditRecord]:
        m = django_models(self.alias)
        with self._boundary("read the audit trail"):
            rows = m.Audit.objects.using(self.alias).filter(namespace=namespace)
            if entry is not None:
                rows = rows.filter(entry=entry)
            values = list(
                rows.order_by("-id").values_list(
                    "id", "at", "actor", "action", "entry", "windows", "note"
                )[:limit]
            )
        return [audit_record(v[0], v[1], v[2:]) for v in values]

    def forget_entry(self, namespace: str, entry: str) -> bool:
        m = django_models(self.alias)
        with self._write("forget an entry"):
            deleted, _ = (
                m.Entry.objects.using(self.alias).filter(namespace=namespace, name=entry).delete()
            )
        return bool(deleted)

    def _write_windows(
        self, namespace: str, rows: Sequence[WindowRow], replica: Replica
    ) -> list[int | None]:
        m = django_models(self.alias)
        self._check_lengths(namespace, [r.entry for r in rows])
        who = replica_columns(replica)
        columns = ("entry", "window_at", "status", "task_id", "task_name", "reason")
        with self._write("write windows") as connection:
            now = vendors.clock(connection)
            dispatches = m.Dispatch.objects.using(self.alias)
            dispatches.bulk_create(
                [
                    m.Dispatch(
                        namespace=namespace,
                        **dict(zip(columns, row[:6], strict=True)),
                        skipped_from=row[6],
                        skipped_count=row[7],
                        claimed_at=now,
                        **who,
                    )
                    for row in window_rows(rows)
                ],
                ignore_conflicts=True,
                batch_size=1000,
            )
            # The rows this call inserted, as a tick reads its own back: this replica's id
            # and this call's instant. A window that had a row keeps it and is not returned.
            found = dispatches.filter(
                namespace=namespace,
                claimed_at=now,
                replica=replica.id,
                entry__in=sorted({r.entry for r in rows}),
            ).values_list("id", "entry", "window_at", "task_id", "reason")
            ours = {(e, w): (i, t, r) for i, e, w, t, r in found}
        inserted = {
            (r.entry, r.window): ours[r.entry, r.window][0]
            for r in rows
            if ours.get((r.entry, r.window), (None, None, None))[1:] == (r.task_id, r.reason)
        }
        return ids_in_order(rows, inserted)

    def save_runtime_entry(self, namespace: str, name: str, spec: str, *, replace: bool) -> bool:
        from django.db import IntegrityError, transaction  # noqa: PLC0415
        from django.utils import timezone  # noqa: PLC0415

        m = django_models(self.alias)
        entries = m.RuntimeEntry.objects.using(self.alias)
        with self._boundary("store an entry") as connection, vendors.write(connection):
            now = timezone.now()
            if replace:
                if not entries.filter(namespace=namespace, name=name).update(
                    spec=spec, updated_at=now
                ):
                    return False
            else:
                try:
                    with transaction.atomic(using=self.alias):  # a savepoint: a race loses here
                        entries.create(namespace=namespace, name=name, spec=spec, updated_at=now)
                except IntegrityError:
                    return False
            self._bump_runtime_version(namespace)
        return True

    def delete_runtime_entry(self, namespace: str, name: str) -> bool:
        m = django_models(self.alias)
        with self._boundary("delete a stored entry") as connection, vendors.write(connection):
            deleted, _ = (
                m.RuntimeEntry.objects.using(self.alias)
                .filter(namespace=namespace, name=name)
                .delete()
            )
            if not deleted:
                return False
            self._bump_runtime_version(namespace)
        return True

    def _bump_runtime_version(self, namespace: str) -> None:
        """Add one to the namespace's version, inside the caller's transaction."""
        from django.db import IntegrityError, transaction  # noqa: PLC0415
        from django.db.models import F  # noqa: PLC0415

        counters = django_models(self.alias).Counter.objects.using(self.alias)
        counter = counters.filter(namespace=namespace, name=RUNTIME_COUNTER)
        if counter.update(value=F("value") + 1):
            return
        try:
            with transaction.atomic(using=self.alias):
                counters.create(namespace=namespace, name=RUNTIME_COUNTER, value=1)
        except IntegrityError:  # created meanwhile by another change: count this one too
            counter.update(value=F("value") + 1)

    def runtime_entries(self, namespace: str) -> dict[str, str]:
        m = django_models(self.alias)
        with self._boundary("load stored entries"):
            rows = (
                m.RuntimeEntry.objects.using(self.alias)
                .filter(namespace=namespace)
                .values_list("name", "spec")
            )
            return {str(name): str(spec) for name, spec in rows}

    def runtime_version(self, namespace: str) -> int:
        m = django_models(self.alias)
        with self._boundary("read the stored entries' version"):
            found = (
                m.Counter.objects.using(self.alias)
                .filter(namespace=namespace, name=RUNTIME_COUNTER)
                .values_list("value", flat=True)
                .first()
            )
        return 0 if found is None else int(found)
