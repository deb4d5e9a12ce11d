"""The PostgreSQL store (psycopg 3): a transaction-scoped advisory lock, claims under a unique key.

One tick is two network round trips, however many entries are due: the first message
opens the transaction, takes the lock, reads `clock_timestamp()` and loads the states;
the second inserts every claim in one `INSERT ... SELECT FROM unnest() ON CONFLICT DO
NOTHING RETURNING`, advances the states, takes over stale claims and commits. Each is
one simple-protocol message of several statements (client-side binding), because the
server only arms `idle_in_transaction_session_timeout`, which bounds how long a frozen
replica can hold the lock, after a plain ReadyForQuery. The lock is
`pg_try_advisory_xact_lock`, released with the transaction, so it also works behind
PgBouncer in transaction mode.

This module owns the connection, its error boundary and the migrations; the operations
live in `statements.PostgresOperations`, which the `django://` store also runs, on
Django's connection, where the alias is PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, suppress
from datetime import timedelta
from typing import Any

try:
    import psycopg
    import psycopg.errors
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "safebeat's PostgreSQL store needs psycopg 3: pip install 'safebeat[postgres]'"
    ) from exc

from safebeat.errors import StoreError, StoreUnavailable
from safebeat.records import TickResult
from safebeat.store_urls import redact, scrub
from safebeat.stores.postgres.loaders import read_unreadable_timestamps
from safebeat.stores.postgres.statements import Cursor, PostgresOperations, Q, tick_limits
from safebeat.stores.protocols import StoreCheck
from safebeat.stores.refusals import refusal_hint
from safebeat.stores.sql_common import advisory_key
from safebeat.stores.sqlfiles import Migration, apply_pending, load_migrations, schema_target

MIGRATIONS = load_migrations(__name__)
_MIGRATION_LOCK = advisory_key("migrate")


class PostgresStore(PostgresOperations):
    """Implements `safebeat.stores.protocols.Store` on PostgreSQL. One connection, one thread."""

    def __init__(
        self,
        url: str,
        *,
        lock_timeout: timedelta = timedelta(seconds=5),
        statement_timeout: timedelta = timedelta(seconds=60),
        connect_timeout: int = 5,
    ) -> None:
        self._url = url
        self.display_url = redact(url)
        self._connect_timeout = connect_timeout
        self._conn: psycopg.Connection[Any] | None = None
        limits = tick_limits(lock_timeout, statement_timeout)
        super().__init__(_Cursors(self._boundary, limits), limits=limits)

    # --- connection and error boundary ----------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(
                self._url,
                autocommit=True,
                # No server-side prepared statements: PgBouncer in transaction mode
                # (before 1.21) cannot keep them across transactions.
                prepare_threshold=None,
                connect_timeout=self._connect_timeout,
                application_name="safebeat",
                keepalives=1,
                keepalives_idle=10,
                keepalives_interval=5,
                keepalives_count=3,
                tcp_user_timeout=int(self._connect_timeout * 3000),
            )
            read_unreadable_timestamps(self._conn.adapters)
        return self._conn

    @contextmanager
    def _boundary(self, action: str) -> Iterator[psycopg.Connection[Any]]:
        """Yield the connection; map driver errors onto safebeat's, without passwords."""
        try:
            conn = self._connection()
        except psycopg.Error as exc:
            self._drop()
            raise self._unreachable(action, exc) from exc
        try:
            yield conn
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            self._drop()
            raise self._unreachable(action, exc) from exc
        except psycopg.errors.UndefinedTable as exc:
            self._rollback()
            raise StoreError(
                f"{self._message(action, exc)}; the schema is missing: run `safebeat migrate`"
            ) from exc
        except psycopg.Error as exc:
            if conn.closed or conn.broken:
                # e.g. the server ended the session (idle-in-transaction timeout, shutdown).
                self._drop()
                raise StoreUnavailable(self._message(action, exc)) from exc
            self._rollback()
            raise StoreError(self._message(action, exc)) from exc
        except BaseException:
            self._rollback()
            raise

    def _message(self, action: str, exc: BaseException) -> str:
        detail = scrub(str(exc).strip() or type(exc).__name__, self._url)
        return f"PostgreSQL store {self.display_url}: {action} failed: {detail}"

    def _unreachable(self, action: str, exc: BaseException) -> StoreError:
        """StoreUnavailable (beat retries) unless the server refused our user, password or
        database: a configuration error, which says what to check."""
        hint = refusal_hint(exc)
        if hint is not None:
            return StoreError(f"{self._message(action, exc)}; {hint}")
        return StoreUnavailable(self._message(action, exc))

    def _rollback(self) -> None:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            return
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            try:
                conn.execute("ROLLBACK")
            except psycopg.Error:
                self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with suppress(psycopg.Error):
                conn.close()

    def close(self) -> None:
        self._drop()

    # --- schema ---------------------------------------------------------------------------

    def migrate(self) -> int:
        with self._boundary("migrate") as conn, conn.transaction():
            # Bounded like a tick: another migrator frozen while it holds the migration
            # lock makes this one fail after lock_timeout, not wait for ever.
            conn.execute(Q["bound_transaction"], self._limits)
            conn.execute(Q["lock_migrations"], {"key": _MIGRATION_LOCK})
            conn.execute(Q["create_version_table"])

            def apply(migration: Migration) -> None:
                conn.execute(migration.sql)
                params = {"version": migration.version, "name": migration.name}
                conn.execute(Q["record_migration"], params)

            return apply_pending(MIGRATIONS, self._schema_version(conn), apply)

    expected_schema_version = schema_target(MIGRATIONS)

    def checks(self) -> list[StoreCheck]:
        return []

    def schema_version(self) -> int:
        """Return the applied schema version (0: never migrated)."""
        with self._boundary("read the schema version") as conn:
            exists = conn.execute("SELECT to_regclass('safebeat_schema_version')").fetchone()
            return self._schema_version(conn) if exists and exists[0] else 0

    @staticmethod
    def _schema_version(conn: psycopg.Connection[Any]) -> int:
        row = conn.execute(Q["schema_version"]).fetchone()
        return int(row[0]) if row else 0


class _Cursors:
    """The cursor source of `PostgresStore`: its connection, inside its error boundary."""

    def __init__(
        self,
        boundary: Callable[[str], AbstractContextManager[psycopg.Connection[Any]]],
        limits: Mapping[str, str],
    ) -> None:
        self._boundary = boundary
        self._limits = limits

    @contextmanager
    def read(self, action: str) -> Iterator[Cursor]:
        with self._boundary(action) as conn:
            yield conn.cursor()

    statement = read  # in autocommit, one statement commits by itself

    @contextmanager
    def transaction(self, action: str) -> Iterator[Cursor]:
        with self._boundary(action) as conn, conn.transaction():
            # Bounded like a tick: a replica frozen here loses its session after lock_timeout.
            conn.execute(Q["bound_transaction"], self._limits)
            yield conn.cursor()

    def tick(
        self, action: str, run: Callable[[Cursor, bool], TickResult | None]
    ) -> TickResult | None:
        with self._boundary(action) as conn:
            return run(psycopg.ClientCursor(conn), True)
