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
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta
from typing import Any

try:
    import psycopg
    import psycopg.errors
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "safebeat's PostgreSQL store needs psycopg 3: pip install 'safebeat[postgres]'"
    ) from exc

from safebeat.errors import StoreError, StoreUnavailable
from safebeat.identity import Replica
from safebeat.stores.base import (
    Claim,
    Definition,
    DispatchRecord,
    EntryState,
    NewClaim,
    Outcome,
    Planner,
    Reclaim,
    Registration,
    ReplicaRecord,
    Start,
    Status,
    TickResult,
)
from safebeat.stores.sql_common import (
    DispatchRow,
    advisory_key,
    as_columns,
    dispatch_rows,
    replica_columns,
    states_after,
)
from safebeat.stores.sqlfiles import load_migrations, load_queries
from safebeat.urls import redact, scrub

Q = load_queries(__name__)
MIGRATIONS = load_migrations(__name__)
_MIGRATION_LOCK = advisory_key("migrate")
_BEGIN_TICK = ";\n".join(["BEGIN", Q["bound_transaction"], Q["try_tick_lock"], Q["load_states"]])


def _ms(value: timedelta) -> str:
    return f"{int(value.total_seconds() * 1000)}ms"


class PostgresStore:
    """Implements `safebeat.stores.base.Store` on PostgreSQL. One connection, one thread."""

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
        self._timeouts = {
            "idle": _ms(lock_timeout),
            "lock": _ms(lock_timeout),
            "statement": _ms(statement_timeout),
        }
        self._connect_timeout = connect_timeout
        self._conn: psycopg.Connection[Any] | None = None

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
        return self._conn

    @contextmanager
    def _boundary(self, action: str) -> Iterator[psycopg.Connection[Any]]:
        """Yield the connection; map driver errors onto safebeat's, without passwords."""
        try:
            conn = self._connection()
        except psycopg.Error as exc:
            self._drop()
            raise StoreUnavailable(self._message(action, exc)) from exc
        try:
            yield conn
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            self._drop()
            raise StoreUnavailable(self._message(action, exc)) from exc
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
            conn.execute(Q["lock_migrations"], {"key": _MIGRATION_LOCK})
            conn.execute(Q["create_version_table"])
            version = self._schema_version(conn)
            for migration in MIGRATIONS:
                if migration.version > version:
                    conn.execute(migration.sql)
                    conn.execute(
                        Q["record_migration"],
                        {"version": migration.version, "name": migration.name},
                    )
                    version = migration.version
            return version

    def schema_version(self) -> int:
        """Return the applied schema version (0: never migrated)."""
        with self._boundary("read the schema version") as conn:
            exists = conn.execute("SELECT to_regclass('safebeat_schema_version')").fetchone()
            return self._schema_version(conn) if exists and exists[0] else 0

    @staticmethod
    def _schema_version(conn: psycopg.Connection[Any]) -> int:
        row = conn.execute(Q["schema_version"]).fetchone()
        return int(row[0]) if row else 0

    # --- the protocol ---------------------------------------------------------------------

    def clock(self) -> datetime:
        with self._boundary("read the clock") as conn:
            row = conn.execute(Q["clock"]).fetchone()
            assert row is not None  # noqa: S101 - SELECT always returns one row
            now: datetime = row[0]
            return now

    def register(
        self, namespace: str, definitions: Sequence[Definition], replica: Replica
    ) -> Registration:
        names = [d.name for d in definitions]
        with self._boundary("register entries") as conn, conn.transaction():
            clock_row = conn.execute(Q["clock"]).fetchone()
            assert clock_row is not None  # noqa: S101
            before = dict(
                conn.execute(
                    Q["registered_digests"], {"namespace": namespace, "names": names}
                ).fetchall()
            )
            conn.execute(
                Q["register"],
                {
                    "namespace": namespace,
                    "now": clock_row[0],
                    "replica": replica.id,
                    "names": names,
                    "schedules": [d.schedule for d in definitions],
                    "digests": [d.digest for d in definitions],
                },
            )
            states = self._load(conn, namespace, names)
        changed = {
            d.name: before[d.name]
            for d in definitions
            if d.name in before and before[d.name] != d.digest
        }
        return Registration(states, changed)

    def states(self, namespace: str) -> dict[str, EntryState]:
        with self._boundary("load entry states") as conn:
            rows = conn.execute(Q["all_states"], {"namespace": namespace}).fetchall()
        return {row[0]: EntryState(*row) for row in rows}

    @staticmethod
    def _load(
        conn: psycopg.Connection[Any], namespace: str, names: Sequence[str]
    ) -> dict[str, EntryState]:
        rows = conn.execute(Q["load_states"], {"namespace": namespace, "names": names})
        return {row[0]: EntryState(*row) for row in rows.fetchall()}

    def tick(
        self,
        namespace: str,
        names: Collection[str],
        planner: Planner,
        *,
        replica: Replica,
        reclaim: Reclaim | None = None,
    ) -> TickResult | None:
        names = list(names)
        with self._boundary("tick") as conn:
            cursor = psycopg.ClientCursor(conn)
            lock_rows, state_rows = _result_sets(
                cursor,
                _BEGIN_TICK,
                {
                    **self._timeouts,
                    "key": advisory_key("tick", namespace),
                    "namespace": namespace,
                    "names": names,
                },
            )[1:]
            locked, now = lock_rows[0]
            if not locked:
                conn.execute("ROLLBACK")
                return None
            states = {row[0]: EntryState(*row) for row in state_rows}
            plan = planner(now, states)
            rows = dispatch_rows(plan)
            who = replica_columns(replica)
            parts, params = [], {"namespace": namespace, "now": now, **who}
            if rows:
                parts.append(Q["insert_dispatches"])
                params.update(as_columns(rows))
            if plan.advances:
                parts.append(Q["advance_states"])
                params["advance_names"] = list(plan.advances)
                params["advance_windows"] = list(plan.advances.values())
            if reclaim is not None:
                parts.append(Q["reclaim_stale"])
                params["stale_before"] = now - reclaim.timeout
                params["reclaim_names"] = list(reclaim.entries)
                params["limit"] = reclaim.limit
            returned = _result_sets(cursor, ";\n".join([*parts, "COMMIT"]), params)
        inserted = returned.pop(0) if rows else []
        stale = returned.pop(0) if reclaim is not None else []
        claimed = [
            Claim(row[0], row[1], row[2], row[3], 1)
            for row in inserted
            if row[4] == Status.CLAIMED.value
        ]
        reclaimed = [Claim(*row) for row in stale]
        return TickResult(now, states_after(states, plan), claimed, reclaimed)

    def record_publish(
        self, namespace: str, sent: Sequence[int], failed: Mapping[int, str]
    ) -> None:
        if not sent and not failed:
            return
        with self._boundary("record publishing") as conn:
            if sent:
                conn.execute(Q["mark_sent"], {"ids": list(sent)})
            if failed:
                conn.execute(
                    Q["mark_failed"], {"ids": list(failed), "errors": list(failed.values())}
                )

    def heartbeat(
        self, namespace: str, replica: Replica, version: str, definitions: Mapping[str, str]
    ) -> None:
        with self._boundary("heartbeat") as conn:
            conn.execute(
                Q["heartbeat"],
                {
                    "namespace": namespace,
                    **replica_columns(replica),
                    "version": version,
                    "definitions": json.dumps(dict(definitions), sort_keys=True),
                },
            )

    def replicas(self, namespace: str) -> list[ReplicaRecord]:
        with self._boundary("list replicas") as conn:
            rows = conn.execute(Q["replicas"], {"namespace": namespace}).fetchall()
        return [ReplicaRecord(*row) for row in rows]

    def history(
        self, namespace: str, entry: str | None = None, limit: int = 100
    ) -> list[DispatchRecord]:
        with self._boundary("read history") as conn:
            rows = conn.execute(
                Q["history"], {"namespace": namespace, "entry": entry, "limit": limit}
            ).fetchall()
        return [_record(row) for row in rows]

    def set_paused(self, namespace: str, entry: str, paused: bool) -> bool:
        with self._boundary("pause an entry") as conn:
            cursor = conn.execute(
                Q["set_paused"], {"namespace": namespace, "name": entry, "paused": paused}
            )
            return cursor.rowcount == 1

    def claim_extra(
        self, namespace: str, claims: Sequence[NewClaim], *, replica: Replica, reason: str
    ) -> list[Claim]:
        if not claims:
            return []
        rows: list[DispatchRow] = [
            (c.entry, c.window, Status.CLAIMED.value, c.task_id, c.task_name, reason, None, None)
            for c in claims
        ]
        with self._boundary("claim windows") as conn, conn.transaction():
            clock_row = conn.execute(Q["clock"]).fetchone()
            assert clock_row is not None  # noqa: S101 - SELECT always returns one row
            inserted = conn.execute(
                Q["insert_dispatches"],
                {
                    "namespace": namespace,
                    "now": clock_row[0],
                    **replica_columns(replica),
                    **as_columns(rows),
                },
            ).fetchall()
        return [Claim(row[0], row[1], row[2], row[3], 1) for row in inserted]

    def start_execution(
        self,
        namespace: str,
        entry: str,
        window: datetime,
        *,
        worker: str,
        retries: int,
        stale_after: timedelta,
    ) -> Start:
        with self._boundary("record the start of an execution") as conn:
            row = conn.execute(
                Q["start_execution"],
                {
                    "namespace": namespace,
                    "entry": entry,
                    "window": window,
                    "worker": worker,
                    "retries": retries,
                    "stale_after": stale_after,
                },
            ).fetchone()
        return Start.UNKNOWN if row is None else Start(row[0])

    def finish_execution(
        self,
        namespace: str,
        entry: str,
        window: datetime,
        *,
        worker: str,
        retries: int,
        outcome: Outcome,
        runtime: timedelta,
        detail: str | None = None,
    ) -> None:
        with self._boundary("record the end of an execution") as conn:
            conn.execute(
                Q["finish_execution"],
                {
                    "namespace": namespace,
                    "entry": entry,
                    "window": window,
                    "worker": worker,
                    "retries": retries,
                    "outcome": outcome.value,
                    "runtime": runtime,
                    "detail": detail,
                },
            )

    def claim_effect(
        self, namespace: str, key: str, *, owner: str, keep_for: timedelta, task_id: str | None
    ) -> bool:
        with self._boundary("claim an effect key") as conn:
            row = conn.execute(
                Q["claim_effect"],
                {
                    "namespace": namespace,
                    "key": key,
                    "owner": owner,
                    "task_id": task_id,
                    "keep_for": keep_for,
                },
            ).fetchone()
        return row is not None

    def release_effect(self, namespace: str, key: str, *, owner: str) -> bool:
        with self._boundary("release an effect key") as conn:
            deleted = conn.execute(
                Q["release_effect"], {"namespace": namespace, "key": key, "owner": owner}
            ).rowcount
        return bool(deleted)

    def prune(self, namespace: str, before: datetime) -> int:
        with self._boundary("prune") as conn, conn.transaction():
            deleted = conn.execute(
                Q["prune_dispatches"], {"namespace": namespace, "before": before}
            ).rowcount
            conn.execute(Q["prune_replicas"], {"namespace": namespace, "before": before})
            deleted += conn.execute(Q["prune_effects"], {"namespace": namespace}).rowcount
        return deleted


def _record(row: Sequence[Any]) -> DispatchRecord:
    values = list(row)
    values[3] = Status(values[3])
    if values[18] is not None:
        values[18] = Outcome(values[18])
    return DispatchRecord(*values)


def _result_sets(
    cursor: psycopg.ClientCursor[Any], statements: str, params: Mapping[str, Any]
) -> list[list[Any]]:
    """Send several statements as one message; return the rows of those that return rows."""
    cursor.execute(statements, params)
    results = []
    while True:
        if cursor.description is not None:
            results.append(cursor.fetchall())
        if not cursor.nextset():
            return results
