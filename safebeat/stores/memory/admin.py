"""The memory store's reads and changes for operators: states, history, pauses, extra claims,
entries added at run time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from safebeat import records
from safebeat.facts import WindowRow
from safebeat.identity import Replica
from safebeat.stores.administering import AdminAdapter
from safebeat.stores.memory.state import MemoryState


class MemoryAdmin(AdminAdapter, MemoryState):
    """`AdminStore` in memory (`schema_version` and `checks` are `MemoryStore`'s)."""

    def states(self, namespace: str) -> dict[str, records.EntryState]:
        with self._mutex:
            ns = self._ns(namespace)
            return self._with_running(ns, ns.entries)

    def state(self, namespace: str, entry: str) -> records.EntryState | None:
        with self._mutex:
            ns = self._ns(namespace)
            found = ns.entries.get(entry)
            return None if found is None else self._with_running(ns, {entry: found})[entry]

    def replicas(self, namespace: str) -> list[records.ReplicaRecord]:
        with self._mutex:
            found = list(self._ns(namespace).replicas.values())
        return sorted(found, key=lambda r: r.heartbeat_at, reverse=True)

    def heartbeats(self, namespace: str) -> list[datetime]:
        with self._mutex:
            found = [r.heartbeat_at for r in self._ns(namespace).replicas.values()]
        return sorted(found, reverse=True)

    def namespaces(self) -> list[str]:
        with self._mutex:
            return sorted(name for name, ns in self._namespaces.items() if ns.entries)

    def _history(
        self, namespace: str, entry: str | None, limit: int
    ) -> list[records.DispatchRecord]:
        with self._mutex:
            found = [
                r
                for r in self._ns(namespace).dispatches.values()
                if entry is None or r.entry == entry
            ]
        found.sort(key=lambda r: (r.window, r.id), reverse=True)
        return found[:limit]

    def _store_pause(self, namespace: str, entry: str, pause: records.Pause) -> bool:
        with self._mutex:
            ns = self._ns(namespace)
            state = ns.entries.get(entry)
            if state is None:
                return False
            ns.entries[entry] = replace(
                state, paused=pause.paused, paused_until=pause.until, pause_note=pause.note
            )
            return True

    def _append_audit(self, namespace: str, event: records.AuditEvent) -> tuple[int, datetime]:
        with self._mutex:
            ns = self._ns(namespace)
            record = records.AuditRecord.of(self._next_id, self.clock(), event)
            self._next_id += 1
            ns.audit.append(record)
            return record.id, record.at

    def _audit(self, namespace: str, entry: str | None, limit: int) -> list[records.AuditRecord]:
        with self._mutex:
            found = [r for r in self._ns(namespace).audit if entry is None or r.entry == entry]
        return found[::-1][:limit]

    def forget_entry(self, namespace: str, entry: str) -> bool:
        with self._mutex:
            return self._ns(namespace).entries.pop(entry, None) is not None

    def _write_windows(
        self, namespace: str, rows: Sequence[WindowRow], replica: Replica
    ) -> list[int | None]:
        with self._mutex:
            ns, now = self._ns(namespace), self.clock()
            written = [self._window_row(ns, replica, now, row) for row in rows]
        return [None if record is None else record.id for record in written]

    def save_runtime_entry(self, namespace: str, name: str, spec: str, *, replace: bool) -> bool:
        with self._mutex:
            ns = self._ns(namespace)
            if (name in ns.runtime) != replace:
                return False
            ns.runtime[name] = spec
            ns.runtime_version += 1
            return True

    def delete_runtime_entry(self, namespace: str, name: str) -> bool:
        with self._mutex:
            ns = self._ns(namespace)
            if ns.runtime.pop(name, None) is None:
                return False
            ns.runtime_version += 1
            return True

    def runtime_entries(self, namespace: str) -> dict[str, str]:
        with self._mutex:
            return dict(self._ns(namespace).runtime)

    def runtime_version(self, namespace: str) -> int:
        with self._mutex:
            return self._ns(namespace).runtime_version
