"""The SQLite store's reads and changes for operators (CLI, admin): states, history, pauses,
entries added at run time."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from safebeat import records
from safebeat.facts import WindowRow
from safebeat.identity import Replica
from safebeat.stores.administering import AdminAdapter
from safebeat.stores.decoding import DECODE_ERRORS, audit_record
from safebeat.stores.sql_common import audit_columns, replica_columns, window_rows
from safebeat.stores.sqlite.connection import (
    Q,
    SqliteConnection,
    _instant,
    _record,
    _state,
    _us,
    insert_dispatch,
)


class SqliteAdmin(AdminAdapter, SqliteConnection):
    """`AdminStore` on SQLite (`schema_version` and `checks` are `SqliteStore`'s)."""

    def states(self, namespace: str) -> dict[str, records.EntryState]:
        with self._boundary("load entry states") as conn:
            rows = conn.execute(
                Q["all_states"], {"namespace": namespace, "now": _us(self.clock())}
            ).fetchall()
        return {row[0]: _state(row) for row in rows}

    def state(self, namespace: str, entry: str) -> records.EntryState | None:
        with self._boundary("load an entry's state") as conn:
            params = {
                "namespace": namespace,
                "names": json.dumps([entry]),
                "now": _us(self.clock()),
            }
            row = conn.execute(Q["load_states"], params).fetchone()
        return None if row is None else _state(row)

    def replicas(self, namespace: str) -> list[records.ReplicaRecord]:
        with self._boundary("list replicas") as conn:
            rows = conn.execute(Q["replicas"], {"namespace": namespace}).fetchall()
        return [
            records.ReplicaRecord(
                r[0], r[1], r[2], r[3], _instant(r[4]), _instant(r[5]), json.loads(r[6])
            )
            for r in rows
        ]

    def heartbeats(self, namespace: str) -> list[datetime]:
        with self._boundary("list heartbeats") as conn:
            rows = conn.execute(Q["heartbeats"], {"namespace": namespace}).fetchall()
        return [_instant(row[0]) for row in rows]

    def namespaces(self) -> list[str]:
        with self._boundary("list namespaces") as conn:
            return [row[0] for row in conn.execute(Q["namespaces"]).fetchall()]

    def _history(
        self, namespace: str, entry: str | None, limit: int
    ) -> list[records.DispatchRecord]:
        with self._boundary("read history") as conn:
            rows = conn.execute(
                Q["history"], {"namespace": namespace, "entry": entry, "limit": limit}
            ).fetchall()
        return [_record(r) for r in rows]

    def _store_pause(self, namespace: str, entry: str, pause: records.Pause) -> bool:
        with self._write(pause.action) as conn:
            cursor = conn.execute(
                Q["set_paused"],
                {
                    "namespace": namespace,
                    "name": entry,
                    "paused": int(pause.paused),
                    "until": None if pause.until is None else _us(pause.until),
                    "note": pause.note,
                },
            )
            return cursor.rowcount == 1

    def _append_audit(self, namespace: str, event: records.AuditEvent) -> tuple[int, datetime]:
        with self._write("record an operator action") as conn:
            params = {**audit_columns(namespace, event), "now": _us(self.clock())}
            row = conn.execute(Q["record_audit"], params).fetchone()
        return row[0], _instant(row[1])

    def _audit(self, namespace: str, entry: str | None, limit: int) -> list[records.AuditRecord]:
        with self._boundary("read the audit trail") as conn:
            rows = conn.execute(
                Q["audit"], {"namespace": namespace, "entry": entry, "limit": limit}
            ).fetchall()
        return [audit_record(r[0], _maybe_readable(r[1]), r[2:]) for r in rows]

    def forget_entry(self, namespace: str, entry: str) -> bool:
        with self._write("forget an entry") as conn:
            cursor = conn.execute(Q["forget_entry"], {"namespace": namespace, "name": entry})
            return cursor.rowcount == 1

    def _write_windows(
        self, namespace: str, rows: Sequence[WindowRow], replica: Replica
    ) -> list[int | None]:
        who = replica_columns(replica)
        with self._write("write windows") as conn:
            now = self.clock()
            # Not fenced: past windows, written on purpose.
            return [
                insert_dispatch(conn, namespace, row, now, who, fenced=False)
                for row in window_rows(rows)
            ]

    def save_runtime_entry(self, namespace: str, name: str, spec: str, *, replace: bool) -> bool:
        query = Q["replace_runtime_entry"] if replace else Q["add_runtime_entry"]
        with self._write("store an entry") as conn:
            params = {"namespace": namespace, "name": name, "spec": spec}
            cursor = conn.execute(query, {**params, "now": _us(self.clock())})
            if cursor.rowcount != 1:
                return False
            conn.execute(Q["bump_runtime_version"], {"namespace": namespace})
            return True

    def delete_runtime_entry(self, namespace: str, name: str) -> bool:
        with self._write("delete a stored entry") as conn:
            cursor = conn.execute(Q["delete_runtime_entry"], {"namespace": namespace, "name": name})
            if cursor.rowcount != 1:
                return False
            conn.execute(Q["bump_runtime_version"], {"namespace": namespace})
            return True

    def runtime_entries(self, namespace: str) -> dict[str, str]:
        with self._boundary("load stored entries") as conn:
            rows = conn.execute(Q["runtime_entries"], {"namespace": namespace}).fetchall()
        return {str(name): str(spec) for name, spec in rows}

    def runtime_version(self, namespace: str) -> int:
        with self._boundary("read the stored entries' version") as conn:
            row = conn.execute(Q["runtime_version"], {"namespace": namespace}).fetchone()
        return int(row[0])


def _maybe_readable(micros: object) -> object:
    """An instant from its microseconds, or the stored value if it cannot be one (the audit
    record then says so: `decoding.audit_record`)."""
    try:
        return _instant(micros)
    except DECODE_ERRORS:
        return micros
