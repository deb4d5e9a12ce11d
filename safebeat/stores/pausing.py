"""`AdminStore.set_paused` written once: the call becomes a `records.Pause`, which a
backend stores on the entry's row (`_store_pause`)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from safebeat.records import Pause


class _StoresPauses(Protocol):
    def _store_pause(self, namespace: str, entry: str, pause: Pause) -> bool:
        """Set the entry's `paused`, `paused_until` and `pause_note` to `pause`'s; return
        False if the entry is not registered."""
        ...


class SetsPaused:
    """`AdminStore.set_paused` for a store that provides `_store_pause`."""

    def set_paused(
        self: _StoresPauses,
        namespace: str,
        entry: str,
        paused: bool,
        *,
        until: datetime | None = None,
        note: str | None = None,
    ) -> bool:
        return self._store_pause(namespace, entry, Pause.of(paused, until, note))
