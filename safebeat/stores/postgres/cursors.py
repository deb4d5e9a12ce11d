"""What the PostgreSQL statements run on: a cursor, and the source that lends them cursors.

The statements (`tick.py`, `executions.py`, `admin.py`, put together in
`statements.PostgresOperations`) run over a `CursorSource`: `PostgresStore` lends cursors
of its own psycopg connection, the `django://` store cursors of Django's connection when
the alias is PostgreSQL through psycopg 3. The source owns the connection, maps driver
errors, and decides where a transaction begins and ends (see `CursorSource`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any, Protocol

from safebeat.records import TickResult
from safebeat.stores.sqlfiles import load_queries

Q = load_queries(__package__ or "safebeat.stores.postgres")


class Cursor(Protocol):
    """What the statements need of a cursor: psycopg's, or Django's wrapper of one."""

    @property
    def description(self) -> object: ...

    @property
    def rowcount(self) -> int: ...

    def execute(self, query: str, params: Mapping[str, Any] | None = None) -> object: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def nextset(self) -> bool | None: ...


class CursorSource(Protocol):
    """Where the operations get their cursors: a connection someone else owns, inside its
    error boundary (driver errors become StoreUnavailable or StoreError there). `action`
    names the operation in those errors."""

    def read(self, action: str) -> AbstractContextManager[Cursor]:
        """A cursor for statements that need no transaction of their own (reads)."""
        ...

    def statement(self, action: str) -> AbstractContextManager[Cursor]:
        """A cursor for one write statement (two for record_publish), committed alone."""
        ...

    def transaction(self, action: str) -> AbstractContextManager[Cursor]:
        """A cursor inside one transaction, committed when the block ends."""
        ...

    def tick(
        self, action: str, run: Callable[[Cursor, bool], TickResult | None]
    ) -> TickResult | None:
        """Return `run(cursor, own_transaction)` on a cursor that binds parameters
        client-side; `own_transaction` is False where the caller holds a transaction
        (see `_tick`)."""
        ...


def tick_limits(lock_timeout: timedelta, statement_timeout: timedelta) -> dict[str, str]:
    """The tick transaction's limits, as `bound_transaction` takes them.

    `idle`: how long the server lets the transaction sit idle (a frozen replica holding
    the tick lock) before it ends the session, which releases the lock.
    """
    return {
        "idle": _ms(lock_timeout),
        "lock": _ms(lock_timeout),
        "statement": _ms(statement_timeout),
    }


def _ms(value: timedelta) -> str:
    """`value` in whole milliseconds, rounded up: never `0ms`, which PostgreSQL reads as
    "no timeout" (the settings refuse timeouts under 1 ms, `safebeat.limits.MIN_TIMEOUT`)."""
    return f"{max(1, math.ceil(value / timedelta(milliseconds=1)))}ms"


def now_of(cursor: Cursor) -> datetime:
    """The store's clock, read on `cursor`."""
    cursor.execute(Q["clock"])
    row = cursor.fetchone()
    assert row is not None  # noqa: S101 - SELECT always returns one row
    now: datetime = row[0]
    return now


class Statements:
    """The statements of one client of the store, over a `CursorSource`; `limits` bound a
    tick's transaction (see `tick_limits`)."""

    def __init__(self, cursors: CursorSource, *, limits: Mapping[str, str]) -> None:
        self._cursors = cursors
        self._limits = limits
