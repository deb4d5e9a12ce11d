"""Timestamps PostgreSQL holds and Python cannot (after the year 9999, `infinity`): read as
`Unreadable` in their place, so one such value costs its own row, not the whole result.

psycopg converts a result as it is fetched and raises for a timestamp beyond Python's
datetime, which failed every read of the namespace (`states`, the tick, `history`) for one
pause end in the year 10000. With these loaders on the connection (or on Django's cursor:
never on the user's own connection) the row arrives with an `Unreadable`, and
`safebeat.stores.decoding` turns that row alone into an unreadable state or history line.
Each loader wraps psycopg's own (its C implementation where installed), so a readable
timestamp costs one extra call.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import abc
from psycopg.abc import AdaptContext, Buffer
from psycopg.adapt import AdaptersMap, Loader
from psycopg.pq import Format

from safebeat.stores.decoding import Unreadable

_TIMESTAMPTZ = psycopg.postgres.types["timestamptz"].oid


def _tolerant(fmt: Format) -> type[Loader]:
    found = psycopg.adapters.get_loader(_TIMESTAMPTZ, fmt)
    if found is None:  # pragma: no cover - psycopg always has both
        raise RuntimeError(f"psycopg has no timestamptz loader for format {fmt!r}")
    inner_class: type[abc.Loader] = found

    class TolerantTimestamptzLoader(Loader):
        """psycopg's timestamptz loader, returning `Unreadable` where it would raise."""

        format = fmt

        def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
            super().__init__(oid, context)
            self._inner = inner_class(oid, context)

        def load(self, data: Buffer) -> Any:
            try:
                return self._inner.load(data)
            except (psycopg.DataError, ValueError, OverflowError):
                raw = bytes(data)
                return Unreadable(
                    raw.decode("utf-8", "replace") if fmt == Format.TEXT else raw.hex()
                )

    return TolerantTimestamptzLoader


_LOADERS = (_tolerant(Format.TEXT), _tolerant(Format.BINARY))


def read_unreadable_timestamps(adapters: AdaptersMap) -> None:
    """Make `adapters` (a connection's or a cursor's) load a timestamp Python cannot hold
    as `Unreadable` instead of raising."""
    for loader in _LOADERS:
        adapters.register_loader(_TIMESTAMPTZ, loader)
