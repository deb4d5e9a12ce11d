"""The PostgreSQL statements of the operator tools: states, history, pauses, the audit
trail, windows written by hand, entries added at run time. `write_windows` and the stored
entries' changes run in a transaction the cursor source opens; the others are one statement."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from safebeat import records
from safebeat.facts import WindowRow
from safebeat.identity import Replica
from safebeat.stores.administering import AdminAdapter
from safebeat.stores.decoding import audit_record, record_of_row, state_of_row
from safebeat.stores.postgres.cursors import Q, Statements, now_of
from safebeat.stores.sql_common import (
    array_literal,
    as_columns,
    audit_columns,
    ids_in_order,
    replica_columns,
    window_rows,
)


class AdminStatements(AdminAdapter, Statements):
    """`AdminStore` and `RuntimeEntryStore` on PostgreSQL (`schema_version` and `checks`
    are the connection owner's)."""

    def states(self, namespace: str) -> dict[str, records.EntryState]:
        with self._cursors.read("load entry states") as cursor:
            cursor.execute(Q["all_states"], {"namespace": namespace})
            return {row[0]: state_of_row(row) for row in cursor.fetchall()}

    def state(self, namespace: str, entry: str) -> records.EntryState | None:
        with self._cursors.read("load an entry's state") as cursor:
            params = {"namespace": namespace, "names": array_literal([entry])}
            cursor.execute(Q["load_states"], params)
            row = cursor.fetchone()
            return None if row is None else state_of_row(row)

    def replicas(self, namespace: str) -> list[records.ReplicaRecord]:
        with self._cursors.read("list replicas") as cursor:
            cursor.execute(Q["replicas"], {"namespace": namespace})
            found = []
            for (
                replica,
                host,
                pid,
                version,
                started_at,
                heartbeat_at,
                definitions,
            ) in cursor.fetchall():
                loaded = json.loads(definitions) if isinstance(definitions, str) else definitions
                # (Django's connections load jsonb as text; psycopg's own, as Python values.)
                found.append(
                    records.ReplicaRecord(
                        replica, host, pid, version, started_at, heartbeat_at, loaded
                    )
                )
            return found

    def heartbeats(self, namespace: str) -> list[datetime]:
        with self._cursors.read("list heartbeats") as cursor:
            cursor.execute(Q["heartbeats"], {"namespace": namespace})
            return [row[0] for row in cursor.fetchall()]

    def namespaces(self) -> list[str]:
        with self._cursors.read("list namespaces") as cursor:
            cursor.execute(Q["namespaces"])
            return [str(row[0]) for row in cursor.fetchall()]

    def _history(
        self, namespace: str, entry: str | None, limit: int
    ) -> list[records.DispatchRecord]:
        with self._cursors.read("read history") as cursor:
            cursor.execute(Q["history"], {"namespace": namespace, "entry": entry, "limit": limit})
            return [_record(row) for row in cursor.fetchall()]

    def _store_pause(self, namespace: str, entry: str, pause: records.Pause) -> bool:
        with self._cursors.statement(pause.action) as cursor:
            cursor.execute(
                Q["set_paused"],
                {
                    "namespace": namespace,
                    "name": entry,
                    "paused": pause.paused,
                    "until": pause.until,
                    "note": pause.note,
                },
            )
            return cursor.rowcount == 1

    def _append_audit(self, namespace: str, event: records.AuditEvent) -> tuple[int, datetime]:
        with self._cursors.statement("record an operator action") as cursor:
            cursor.execute(Q["record_audit"], audit_columns(namespace, event))
            row = cursor.fetchone()
            assert row is not None  # noqa: S101 - INSERT ... RETURNING returns the row
            return row[0], row[1]

    def _audit(self, namespace: str, entry: str | None, limit: int) -> list[records.AuditRecord]:
        with self._cursors.read("read the audit trail") as cursor:
            cursor.execute(Q["audit"], {"namespace": namespace, "entry": entry, "limit": limit})
            return [audit_record(r[0], r[1], r[2:]) for r in cursor.fetchall()]

    def forget_entry(self, namespace: str, entry: str) -> bool:
        with self._cursors.statement("forget an entry") as cursor:
            cursor.execute(Q["forget_entry"], {"namespace": namespace, "name": entry})
            return cursor.rowcount == 1

    def _write_windows(
        self, namespace: str, rows: Sequence[WindowRow], replica: Replica
    ) -> list[int | None]:
        """Write windows outside a tick (trigger, backfill); inside the caller's transaction."""
        with self._cursors.transaction("write windows") as cursor:
            cursor.execute(
                Q["insert_dispatches"],
                {
                    "namespace": namespace,
                    "now": now_of(cursor),
                    "fenced": False,  # past windows, written on purpose
                    **replica_columns(replica),
                    **as_columns(window_rows(rows)),
                },
            )
            inserted = {(row[1], row[2]): row[0] for row in cursor.fetchall()}
        return ids_in_order(rows, inserted)

    def save_runtime_entry(self, namespace: str, name: str, spec: str, *, replace: bool) -> bool:
        query = Q["replace_runtime_entry"] if replace else Q["add_runtime_entry"]
        with self._cursors.transaction("store an entry") as cursor:
            cursor.execute(query, {"namespace": namespace, "name": name, "spec": spec})
            if cursor.rowcount != 1:
                return False
            cursor.execute(Q["bump_runtime_version"], {"namespace": namespace})
            return True

    def delete_runtime_entry(self, namespace: str, name: str) -> bool:
        with self._cursors.transaction("delete a stored entry") as cursor:
            cursor.execute(Q["delete_runtime_entry"], {"namespace": namespace, "name": name})
            if cursor.rowcount != 1:
                return False
            cursor.execute(Q["bump_runtime_version"], {"namespace": namespace})
            return True

    def runtime_entries(self, namespace: str) -> dict[str, str]:
        with self._cursors.read("load stored entries") as cursor:
            cursor.execute(Q["runtime_entries"], {"namespace": namespace})
            return {str(name): str(spec) for name, spec in cursor.fetchall()}

    def runtime_version(self, namespace: str) -> int:
        with self._cursors.read("read the stored entries' version") as cursor:
            cursor.execute(Q["runtime_version"], {"namespace": namespace})
            return int(cursor.fetchone()[0])


def _record(row: Sequence[Any]) -> records.DispatchRecord:
    def decode() -> records.DispatchRecord:
        values = list(row)
        values[3] = records.Status(values[3])
        if values[18] is not None:
            values[18] = records.Outcome(values[18])
        return records.DispatchRecord(*values)

    return record_of_row(row, decode)
