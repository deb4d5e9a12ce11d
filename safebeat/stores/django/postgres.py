"""The `django://` store on PostgreSQL: the `postgresql://` store's statements, Django's connection.

Where the alias is PostgreSQL through psycopg 3, the store runs
`safebeat.stores.postgres.statements` (arrays and `unnest`, one statement per step) on
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
  One-statement writes commit themselves; `register`, `claim_extra` and `prune` run in
  `transaction.atomic`.
- Inside a transaction the caller holds (`atomic`, `ATOMIC_REQUESTS`, autocommit off),
  every write is a savepoint of it and commits with it; the tick lock is held until then.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta
from typing import Any

import psycopg
from django.db import DatabaseError, transaction

from safebeat.identity import Replica
from safebeat.records import (
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
    TickResult,
)
from safebeat.stores.django import vendors
from safebeat.stores.postgres import statements

#: The bound on each statement of a tick, as the ORM path sets it.
STATEMENT_TIMEOUT = timedelta(seconds=60)
_IDLE = psycopg.pq.TransactionStatus.IDLE


class PostgresStatements:
    """The Store operations of `django://` on a PostgreSQL alias, on Django's connection.

    Each method takes the alias's connection (Django's `DatabaseWrapper`); the caller
    maps `django.db` errors onto safebeat's.
    """

    def __init__(self, lock_timeout: timedelta) -> None:
        self._limits = statements.tick_limits(lock_timeout, STATEMENT_TIMEOUT)

    def tick(
        self,
        connection: Any,
        namespace: str,
        names: Collection[str],
        planner: Planner,
        *,
        replica: Replica,
        reclaim: Reclaim | None,
    ) -> TickResult | None:
        with _cursor(connection) as cursor:
            if not _in_transaction(connection):
                with _own_transaction(connection):
                    return statements.tick(
                        cursor,
                        namespace,
                        names,
                        planner,
                        replica=replica,
                        reclaim=reclaim,
                        limits=self._limits,
                    )
            try:
                with transaction.atomic(using=connection.alias):
                    result = statements.tick(
                        cursor,
                        namespace,
                        names,
                        planner,
                        replica=replica,
                        reclaim=reclaim,
                        limits=self._limits,
                        own_transaction=False,
                    )
                    if result is None:
                        raise vendors.LockBusy(namespace)  # rolls the savepoint back
                    return result
            except vendors.LockBusy:
                return None

    def register(
        self,
        connection: Any,
        namespace: str,
        definitions: Sequence[Definition],
        replica: Replica,
    ) -> Registration:
        with vendors.write(connection), _cursor(connection) as cursor:
            return statements.register(cursor, namespace, definitions, replica)

    def states(self, connection: Any, namespace: str) -> dict[str, EntryState]:
        with _cursor(connection) as cursor:
            return statements.states(cursor, namespace)

    def record_publish(
        self, connection: Any, sent: Sequence[int], failed: Mapping[int, str]
    ) -> None:
        with _statement(connection) as cursor:
            statements.record_publish(cursor, sent, failed)

    def heartbeat(
        self,
        connection: Any,
        namespace: str,
        replica: Replica,
        version: str,
        definitions: Mapping[str, str],
    ) -> None:
        with _statement(connection) as cursor:
            statements.heartbeat(cursor, namespace, replica, version, definitions)

    def replicas(self, connection: Any, namespace: str) -> list[ReplicaRecord]:
        with _cursor(connection) as cursor:
            return statements.replicas(cursor, namespace)

    def history(
        self, connection: Any, namespace: str, entry: str | None, limit: int
    ) -> list[DispatchRecord]:
        with _cursor(connection) as cursor:
            return statements.history(cursor, namespace, entry, limit)

    def set_paused(self, connection: Any, namespace: str, entry: str, paused: bool) -> bool:
        with _statement(connection) as cursor:
            return statements.set_paused(cursor, namespace, entry, paused)

    def claim_extra(
        self,
        connection: Any,
        namespace: str,
        claims: Sequence[NewClaim],
        *,
        replica: Replica,
        reason: str,
    ) -> list[Claim]:
        with vendors.write(connection), _cursor(connection) as cursor:
            return statements.claim_extra(cursor, namespace, claims, replica=replica, reason=reason)

    def start_execution(
        self,
        connection: Any,
        namespace: str,
        entry: str,
        window: datetime,
        *,
        worker: str,
        retries: int,
        stale_after: timedelta,
    ) -> Start:
        with _statement(connection) as cursor:
            return statements.start_execution(
                cursor,
                namespace,
                entry,
                window,
                worker=worker,
                retries=retries,
                stale_after=stale_after,
            )

    def finish_execution(
        self,
        connection: Any,
        namespace: str,
        entry: str,
        window: datetime,
        *,
        worker: str,
        retries: int,
        outcome: Outcome,
        runtime: timedelta,
        detail: str | None,
    ) -> None:
        with _statement(connection) as cursor:
            statements.finish_execution(
                cursor,
                namespace,
                entry,
                window,
                worker=worker,
                retries=retries,
                outcome=outcome,
                runtime=runtime,
                detail=detail,
            )

    def claim_effect(
        self,
        connection: Any,
        namespace: str,
        key: str,
        *,
        owner: str,
        keep_for: timedelta,
        task_id: str | None,
    ) -> bool:
        with _statement(connection) as cursor:
            return statements.claim_effect(
                cursor, namespace, key, owner=owner, keep_for=keep_for, task_id=task_id
            )

    def release_effect(self, connection: Any, namespace: str, key: str, *, owner: str) -> bool:
        with _statement(connection) as cursor:
            return statements.release_effect(cursor, namespace, key, owner=owner)

    def prune(self, connection: Any, namespace: str, before: datetime) -> int:
        with vendors.write(connection), _cursor(connection) as cursor:
            return statements.prune(cursor, namespace, before)


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
