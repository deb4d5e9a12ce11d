"""The `django://` store on PostgreSQL: the `postgresql://` store's statements, Django's connection.

Where the alias is PostgreSQL through psycopg 3, the store runs
`safebeat.stores.postgres.statements.PostgresOperations` (arrays and `unnest`, one
statement per step) over cursors of
the alias's own connection instead of compiling ORM queries: a claiming tick is two round
trips and recording what was published one, as with `postgresql://`, whose tables, tick
lock key and clock these are. The statements go through Django's cursor wrapper (query
log, execute wrappers, errors as `django.db` errors) around a psycopg `ClientCursor`,
since a tick sends several statements in one message, which server-side binding cannot.

Transactions follow Django's rules, as the ORM path's do:

- In autocommit (beat, a worker), a tick sends `BEGIN` and `COMMIT` inside its two
  messages, as `postgresql://` does, so the server arms `idle_in_transaction_session_
  timeout` while the lock is held; whatever happens, no transaction is left open (it is
  rolled back, or the connection closed) and Django still finds it in autocommit.
  One-statement writes commit themselves; `register`, `write_windows` and `prune` run in
  `transaction.atomic`.
- Inside a transaction the caller holds (`atomic`, `ATOMIC_REQUESTS`, autocommit off),
  every write is a savepoint of it and commits with it; the tick lock is held until then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from datetime import timedelta
from typing import Any

import psycopg
from django.db import DatabaseError, transaction

from safebeat.records import TickResult
from safebeat.stores.django import vendors
from safebeat.stores.django.base import DjangoDatabase
from safebeat.stores.postgres.loaders import read_unreadable_timestamps
from safebeat.stores.postgres.statements import Cursor, PostgresOperations, tick_limits

#: The bound on each statement of a tick, as the ORM path sets it.
STATEMENT_TIMEOUT = timedelta(seconds=60)
_IDLE = psycopg.pq.TransactionStatus.IDLE


class DjangoPostgresStore(PostgresOperations, DjangoDatabase):
    """Implements `safebeat.stores.protocols.Store` on a PostgreSQL alias: the `postgresql://`
    store's operations over Django's connection, inside the Django store's boundary."""

    def __init__(
        self,
        url: str = "django://",
        *,
        lock_timeout: timedelta = timedelta(seconds=5),
        tick_lock_wait: timedelta = timedelta(milliseconds=100),
    ) -> None:
        DjangoDatabase.__init__(self, url, lock_timeout=lock_timeout, tick_lock_wait=tick_lock_wait)
        PostgresOperations.__init__(
            self,
            _DjangoCursors(self._boundary, lock_timeout),
            limits=tick_limits(lock_timeout, STATEMENT_TIMEOUT),
        )


class _DjangoCursors:
    """Cursors of the alias's connection, with Django's transaction rules (see above)."""

    def __init__(
        self, boundary: Callable[[str], AbstractContextManager[Any]], lock_timeout: timedelta
    ) -> None:
        self._boundary = boundary
        self._lock_timeout = lock_timeout

    @contextmanager
    def read(self, action: str) -> Iterator[Cursor]:
        with self._boundary(action) as connection, _cursor(connection) as cursor:
            yield cursor

    @contextmanager
    def statement(self, action: str) -> Iterator[Cursor]:
        with self._boundary(action) as connection, _statement(connection) as cursor:
            yield cursor

    @contextmanager
    def transaction(self, action: str) -> Iterator[Cursor]:
        with (
            self._boundary(action) as connection,
            vendors.write(connection, bound=self._lock_timeout),
            _cursor(connection) as cursor,
        ):
            yield cursor

    def tick(
        self, action: str, run: Callable[[Cursor, bool], TickResult | None]
    ) -> TickResult | None:
        with self._boundary(action) as connection, _cursor(connection) as cursor:
            if not _in_transaction(connection):
                with _own_transaction(connection):
                    return run(cursor, True)
            try:
                with transaction.atomic(using=connection.alias):
                    result = run(cursor, False)
                    if result is None:
                        raise vendors.LockBusy(action)  # rolls the savepoint back
                    return result
            except vendors.LockBusy:
                return None


@contextmanager
def _cursor(connection: Any) -> Iterator[Any]:
    """Django's cursor on the connection, binding parameters client-side.

    `connection.cursor()` runs Django's health check, connects, checks the thread and logs
    queries when DEBUG is on; its psycopg cursor is a `ClientCursor` unless OPTIONS sets
    `server_side_binding`, in which case one is put in its place.
    """
    wrapper = connection.cursor()
    if not isinstance(wrapper.cursor, psycopg.ClientCursor):
        wrapper.close()
        raw = psycopg.ClientCursor(connection.connection)
        logged = connection.queries_logged
        wrapper = connection.make_debug_cursor(raw) if logged else connection.make_cursor(raw)
    read_unreadable_timestamps(wrapper.cursor.adapters)  # this cursor's, not the connection's
    with wrapper:
        yield wrapper


def _in_transaction(connection: Any) -> bool:
    """Whether the caller holds a transaction: an atomic block, or autocommit turned off."""
    return bool(connection.in_atomic_block or not connection.get_autocommit())


@contextmanager
def _statement(connection: Any) -> Iterator[Any]:
    """A cursor for writes of one statement each, which need no transaction of their own:
    in autocommit each commits itself; inside the caller's transaction they are a
    savepoint of it, so a failure leaves that transaction usable, as on the ORM path."""
    with _cursor(connection) as cursor:
        if _in_transaction(connection):
            with transaction.atomic(using=connection.alias):
                yield cursor
        else:
            yield cursor


@contextmanager
def _own_transaction(connection: Any) -> Iterator[None]:
    """Let the statements send their own BEGIN and COMMIT on a connection in autocommit.

    Django does not see that transaction, so whatever ends the block (a busy lock, an
    error, a planner that raised) must not leave it open: it is rolled back, or, if
    the session cannot even do that, the connection is closed and Django reconnects.
    """
    try:
        yield
    finally:
        raw = connection.connection
        if (
            raw is not None
            and not raw.closed
            and not raw.broken
            and raw.info.transaction_status != _IDLE
        ):
            try:
                raw.execute("ROLLBACK")
            except psycopg.Error:
                with suppress(DatabaseError):
                    connection.close()
