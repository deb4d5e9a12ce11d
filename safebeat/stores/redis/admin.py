"""The Redis store's reads and changes for operators: states, history, pauses, extra claims,
entries added at run time."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import cast

from safebeat import records
from safebeat.facts import WindowRow
from safebeat.identity import Replica
from safebeat.stores.administering import AdminAdapter
from safebeat.stores.decoding import DECODE_ERRORS, audit_record
from safebeat.stores.redis.base import (
    NAMESPACE_PATTERN,
    SLICE,
    RedisBase,
    _instant,
    _record,
    _states,
    _us,
    key_prefix,
    pause_value,
)
from safebeat.stores.sql_common import audit_columns


class RedisAdmin(AdminAdapter, RedisBase):
    """`AdminStore` on Redis (`schema_version` and `checks` are `RedisStore`'s)."""

    def states(self, namespace: str) -> dict[str, records.EntryState]:
        """Read the names, then their states `SLICE` at a time: one script for a big
        namespace would hold Redis for seconds, refusing every replica's tick `BUSY`."""
        prefix = key_prefix(namespace)
        found: dict[str, records.EntryState] = {}
        with self._boundary("load entry states") as client:
            names = sorted(_text(name) for name in client.hkeys(f"{prefix}:digest"))
            for start in range(0, len(names), SLICE):
                part = names[start : start + SLICE]
                columns = self._run("states", [f"{prefix}:digest"], [prefix, *part])
                found.update(_states(part, columns))
        return found

    def state(self, namespace: str, entry: str) -> records.EntryState | None:
        prefix = key_prefix(namespace)
        with self._boundary("load an entry's state"):
            columns = self._run("states", [f"{prefix}:digest"], [prefix, entry])
        return _states([entry], columns).get(entry)

    def replicas(self, namespace: str) -> list[records.ReplicaRecord]:
        prefix = key_prefix(namespace)
        with self._boundary("list replicas"):
            rows = self._run("replicas", [f"{prefix}:heartbeats"], [prefix])
        found = []
        for replica_id, description, started, beat in rows:
            if description is None:
                continue
            info = json.loads(description)
            found.append(
                records.ReplicaRecord(
                    replica=replica_id,
                    host=info["host"],
                    pid=int(info["pid"]),
                    version=info["version"],
                    started_at=_instant(started or beat),
                    heartbeat_at=_instant(beat),
                    definitions=info["definitions"],
                )
            )
        return found

    def heartbeats(self, namespace: str) -> list[datetime]:
        """One ZREVRANGE of the heartbeats sorted set (the replicas' descriptions, with
        their digests, stay unread)."""
        key = f"{key_prefix(namespace)}:heartbeats"
        with self._boundary("list heartbeats") as client:
            reply = client.zrevrange(key, 0, -1, withscores=True)
        beats = cast("list[tuple[str, float]]", reply)  # redis-py types no withscores reply
        return [_instant(score) for _, score in beats]

    def namespaces(self) -> list[str]:
        """Found by SCAN over every node (no index to keep up to date in the tick's path)."""
        found: set[str] = set()
        with self._boundary("list namespaces") as client:
            for key in client.scan_iter(match=NAMESPACE_PATTERN, count=1000):
                text = key.decode() if isinstance(key, bytes) else str(key)
                found.add(text[len("safebeat:{") : -len("}:digest")])
        return sorted(found)

    def _history(
        self, namespace: str, entry: str | None, limit: int
    ) -> list[records.DispatchRecord]:
        prefix = key_prefix(namespace)
        index = f"{prefix}:history" if entry is None else f"{prefix}:history:{entry}"
        with self._boundary("read history"):
            rows = self._run("history", [index], [prefix, limit])
        found = [_record(int(row_id), fields) for row_id, fields in rows if fields]
        found.sort(key=lambda r: (r.window, r.id), reverse=True)
        return found

    def _store_pause(self, namespace: str, entry: str, pause: records.Pause) -> bool:
        prefix = key_prefix(namespace)
        args = [prefix, entry, int(pause.paused), pause_value(pause.until, pause.note)]
        with self._boundary(pause.action):
            done = self._run("set_paused", [f"{prefix}:paused"], args)
        return bool(done)

    def _append_audit(self, namespace: str, event: records.AuditEvent) -> tuple[int, datetime]:
        prefix = key_prefix(namespace)
        record = json.dumps(audit_columns(namespace, event))
        with self._boundary("record an operator action"):
            row_id, at = self._run(
                "record_audit", [f"{prefix}:audit"], [prefix, event.entry or "", record]
            )
        return int(row_id), _instant(at)

    def _audit(self, namespace: str, entry: str | None, limit: int) -> list[records.AuditRecord]:
        prefix = key_prefix(namespace)
        index = f"{prefix}:audit" if entry is None else f"{prefix}:audit:entry:{entry}"
        with self._boundary("read the audit trail"):
            rows = self._run("audit", [index], [prefix, limit])
        found = []
        for row_id, at, text in rows:
            fields = json.loads(text)
            values = [fields[k] for k in ("actor", "action", "entry", "windows", "note")]
            try:
                instant: object = _instant(at)
            except DECODE_ERRORS:  # the record says it cannot be read (decoding.audit_record)
                instant = at
            found.append(audit_record(int(row_id), instant, values))
        found.sort(key=lambda r: r.id, reverse=True)
        return found

    def forget_entry(self, namespace: str, entry: str) -> bool:
        prefix = key_prefix(namespace)
        with self._boundary("forget an entry"):
            done = self._run("forget_entry", [f"{prefix}:digest"], [prefix, entry])
        return bool(done)

    def _write_windows(
        self, namespace: str, rows: Sequence[WindowRow], replica: Replica
    ) -> list[int | None]:
        prefix = key_prefix(namespace)
        args: list[object] = [prefix, replica.id, replica.host, replica.pid]
        for row in rows:
            args += [row.entry, _us(row.window), row.task_id or "", row.task_name or "", row.reason]
        with self._boundary("write windows"):
            ids = self._run("write_windows", [f"{prefix}:seq"], args)
        return [None if i is None else int(i) for i in ids]

    def save_runtime_entry(self, namespace: str, name: str, spec: str, *, replace: bool) -> bool:
        prefix = key_prefix(namespace)
        with self._boundary("store an entry"):
            done = self._run(
                "save_runtime_entry", [f"{prefix}:runtime"], [prefix, name, spec, int(replace)]
            )
        return bool(done)

    def delete_runtime_entry(self, namespace: str, name: str) -> bool:
        prefix = key_prefix(namespace)
        with self._boundary("delete a stored entry"):
            done = self._run("delete_runtime_entry", [f"{prefix}:runtime"], [prefix, name])
        return bool(done)

    def runtime_entries(self, namespace: str) -> dict[str, str]:
        prefix = key_prefix(namespace)
        with self._boundary("load stored entries") as client:
            found = client.hgetall(f"{prefix}:runtime")
        return {_text(name): _text(spec) for name, spec in found.items()}

    def runtime_version(self, namespace: str) -> int:
        prefix = key_prefix(namespace)
        with self._boundary("read the stored entries' version") as client:
            value = client.get(f"{prefix}:runtime_version")
        return 0 if value is None else int(value)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
