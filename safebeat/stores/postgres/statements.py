"""The PostgreSQL store's operations, run on cursors of a connection someone else owns.

`PostgresOperations` implements the store's operations as statements over a
`CursorSource`: `PostgresStore` gives it cursors of its own psycopg connection, the
`django://` store cursors of Django's connection when the alias is PostgreSQL through
psycopg 3. Each operation sends the statements of one store operation and turns the rows
into safebeat's records; the source owns the connection, maps driver errors, and decides
where a transaction begins and ends: the tick sends its own `BEGIN` and `COMMIT` inside
its two messages unless the source holds a transaction already; `register`,
`claim_extra` and `prune` run inside one the source opens; every other operation is one
statement (two for `record_publish` with both outcomes) that needs none.

The tick's two messages are several statements each, so its cursor must bind
parameters client-side (`psycopg.ClientCursor`, or Django's default cursor, which is
one); the other functions work with either kind of cursor.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any, Protocol

from safebeat.identity import Replica
from safebeat.records import (
    AuditEvent,
    AuditRecord,
    Claim,
    Definition,
    DispatchRecord,
    EntryState,
    LeasedRun,
    NewClaim,
    Outcome,
    Planner,
    Reclaim,
    Registration,
    ReplicaRecord,
    Start,
    Status,
    TickResult,
    released_age,
    states_after,
)
from safebeat.stores.sql_common import (
    DispatchRow,
    advisory_key,
    as_columns,
    audit_columns,
    audit_record,
    dispatch_rows,
    replica_columns,
)
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
    return f"{int(value.total_seconds() * 1000)}ms"


#: Definitions per statement when registering: a schedule of 100,000 entries is sent in
#: slices, so neither side builds every parameter of it at once.
REGISTER_SLICE = 5000


def _load(cursor: Cursor, namespace: str, names: Sequence[str]) -> dict[str, EntryState]:
    cursor.execute(Q["load_states"], {"namespace": namespace, "names": list(names)})
    return {row[0]: EntryState(*row) for row in cursor.fetchall()}


def _tick(
    cursor: Cursor,
    namespace: str,
    names: Collection[str],
    planner: Planner,
    *,
    replica: Replica,
    reclaim: Reclaim | None,
    limits: Mapping[str, str],
    own_transaction: bool = True,
) -> TickResult | None:
    """One tick in two messages; None (nothing written) when another replica holds the lock.

    The first message takes the lock, reads the store's clock and loads the states; the
    second inserts the claims and skips, advances the states and takes over stale claims.
    With `own_transaction`, the first begins the transaction, the second commits it, and
    a busy lock rolls it back (one more message). Without, the caller holds a
    transaction and ends it (a busy lock returns None with that transaction still open).
    """
    first = [Q["bound_transaction"], Q["try_tick_lock"], Q["load_states"]]
    lock_rows, state_rows = _result_sets(
        cursor,
        ";\n".join(["BEGIN", *first] if own_transaction else first),
        {
            **limits,
            "key": advisory_key("tick", namespace),
            "namespace": namespace,
            "names": list(names),
        },
    )[1:]
    locked, now = lock_rows[0]
    if not locked:
        if own_transaction:
            cursor.execute("ROLLBACK")
        return None
    states = {row[0]: EntryState(*row) for row in state_rows}
    plan = planner(now, states)
    rows = dispatch_rows(plan)
    parts, params = [], {"namespace": namespace, "now": now, **replica_columns(replica)}
    if rows:
        parts.append(Q["insert_dispatches"])
        params.update(as_columns(rows), fenced=True)
    if plan.advances:
        parts.append(Q["advance_states"])
        params["advance_names"] = list(plan.advances)
        params["advance_windows"] = list(plan.advances.values())
    if reclaim is not None:
        parts.append(Q["reclaim_stale"])
        params["stale_before"] = now - reclaim.timeout
        params["reclaim_names"] = list(reclaim.entries)
        params["limit"] = reclaim.limit
    if own_transaction:
        parts.append("COMMIT")
    returned = _result_sets(cursor, ";\n".join(parts), params) if parts else []
    inserted = returned.pop(0) if rows else []
    stale = returned.pop(0) if reclaim is not None else []
    claimed = [
        Claim(row[0], row[1], row[2], row[3], 1)
        for row in inserted
        if row[4] == Status.CLAIMED.value
    ]
    reclaimed = [Claim(*row) for row in stale]
    return TickResult(now, states_after(states, plan), claimed, reclaimed, plan)


def _now(cursor: Cursor) -> datetime:
    cursor.execute(Q["clock"])
    row = cursor.fetchone()
    assert row is not None  # noqa: S101 - SELECT always returns one row
    now: datetime = row[0]
    return now


def _record(row: Sequence[Any]) -> DispatchRecord:
    values = list(row)
    values[3] = Status(values[3])
    if values[18] is not None:
        values[18] = Outcome(values[18])
    return DispatchRecord(*values)


def _result_sets(cursor: Cursor, statements: str, params: Mapping[str, Any]) -> list[list[Any]]:
    """Send several statements as one message; return the rows of those that return rows."""
    cursor.execute(statements, params)
    results = []
    while True:
        if cursor.description is not None:
            results.append(cursor.fetchall())
        if not cursor.nextset():
            return results


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


class PostgresOperations:
    """The store operations on PostgreSQL: statements over a `CursorSource`.

    Shared by `postgresql://` (its own psycopg connection) and `django://` on a
    PostgreSQL alias (Django's connection): the same tables, lock keys and clock.
    """

    def __init__(self, cursors: CursorSource, *, limits: Mapping[str, str]) -> None:
        self._cursors = cursors
        self._limits = limits

    def tick(
        self,
        namespace: str,
        names: Collection[str],
        planner: Planner,
        *,
        replica: Replica,
        reclaim: Reclaim | None = None,
    ) -> TickResult | None:
        return self._cursors.tick(
            "tick",
            lambda cursor, own: _tick(
                cursor,
                namespace,
                names,
                planner,
                replica=replica,
                reclaim=reclaim,
                limits=self._limits,
                own_transaction=own,
            ),
        )

    def clock(self) -> datetime:
        with self._cursors.read("read the clock") as cursor:
            return _now(cursor)

    def register(
        self, namespace: str, definitions: Sequence[Definition], replica: Replica
    ) -> Registration:
        """Insert new entries, update changed ones; inside the caller's transaction."""
        with self._cursors.transaction("register entries") as cursor:
            now = _now(cursor)
            states: dict[str, EntryState] = {}
            changed: dict[str, str] = {}
            for start in range(0, len(definitions), REGISTER_SLICE) or [0]:
                part = definitions[start : start + REGISTER_SLICE]
                names = [d.name for d in part]
                cursor.execute(Q["registered_digests"], {"namespace": namespace, "names": names})
                before = dict(cursor.fetchall())
                cursor.execute(
                    Q["register"],
                    {
                        "namespace": namespace,
                        "now": now,
                        "replica": replica.id,
                        "names": names,
                        "schedules": [d.schedule for d in part],
                        "digests": [d.digest for d in part],
                    },
                )
                states.update(_load(cursor, namespace, names))
                changed.update(
                    (d.name, before[d.name])
                    for d in part
                    if d.name in before and before[d.name] != d.digest
                )
            return Registration(states, changed)

    def states(self, namespace: str) -> dict[str, EntryState]:
        with self._cursors.read("load entry states") as cursor:
            cursor.execute(Q["all_states"], {"namespace": namespace})
            return {row[0]: EntryState(*row) for row in cursor.fetchall()}

    def record_publish(
        self, namespace: str, sent: Sequence[int], failed: Mapping[int, str]
    ) -> None:
        """Mark claims sent (at the store's clock) or failed with their error: one statement
        each."""
        if not sent and not failed:
            return
        with self._cursors.statement("record publishing") as cursor:
            if sent:
                cursor.execute(Q["mark_sent"], {"ids": list(sent)})
            if failed:
                cursor.execute(
                    Q["mark_failed"], {"ids": list(failed), "errors": list(failed.values())}
                )

    def heartbeat(
        self,
        namespace: str,
        replica: Replica,
        version: str,
        definitions: Mapping[str, str],
    ) -> None:
        with self._cursors.statement("heartbeat") as cursor:
            cursor.execute(
                Q["heartbeat"],
                {
                    "namespace": namespace,
                    **replica_columns(replica),
                    "version": version,
                    "definitions": json.dumps(dict(definitions), sort_keys=True),
                },
            )

    def replicas(self, namespace: str) -> list[ReplicaRecord]:
        with self._cursors.read("list replicas") as cursor:
            cursor.execute(Q["replicas"], {"namespace": namespace})
            records = []
            for (
                replica,
                host,
                pid,
                version,
                started_at,
                heartbeat_at,
                definitions,
            ) in cursor.fetchall():
                loaded = json.loads(definitions) if isinstance(definitions, str) else definitions
                # (Django's connections load jsonb as text; psycopg's own, as Python values.)
                records.append(
                    ReplicaRecord(replica, host, pid, version, started_at, heartbeat_at, loaded)
                )
            return records

    def forget_replica(self, namespace: str, replica: Replica) -> None:
        with self._cursors.statement("forget a replica") as cursor:
            cursor.execute(Q["forget_replica"], {"namespace": namespace, "replica": replica.id})

    def namespaces(self) -> list[str]:
        with self._cursors.read("list namespaces") as cursor:
            cursor.execute(Q["namespaces"])
            return [str(row[0]) for row in cursor.fetchall()]

    def history(
        self, namespace: str, entry: str | None = None, limit: int = 100
    ) -> list[DispatchRecord]:
        with self._cursors.read("read history") as cursor:
            cursor.execute(Q["history"], {"namespace": namespace, "entry": entry, "limit": limit})
            return [_record(row) for row in cursor.fetchall()]

    def set_paused(
        self,
        namespace: str,
        entry: str,
        paused: bool,
        *,
        until: datetime | None = None,
        note: str | None = None,
    ) -> bool:
        with self._cursors.statement("pause an entry" if paused else "resume an entry") as cursor:
            cursor.execute(
                Q["set_paused"],
                {
                    "namespace": namespace,
                    "name": entry,
                    "paused": paused,
                    "until": until if paused else None,
                    "note": note if paused else None,
                },
            )
            return cursor.rowcount == 1

    def record_audit(self, namespace: str, event: AuditEvent) -> AuditRecord:
        with self._cursors.statement("record an operator action") as cursor:
            cursor.execute(Q["record_audit"], audit_columns(namespace, event))
            row = cursor.fetchone()
            assert row is not None  # noqa: S101 - INSERT ... RETURNING returns the row
            return AuditRecord.of(row[0], row[1], event)

    def audit(
        self, namespace: str, entry: str | None = None, limit: int = 100
    ) -> list[AuditRecord]:
        with self._cursors.read("read the audit trail") as cursor:
            cursor.execute(Q["audit"], {"namespace": namespace, "entry": entry, "limit": limit})
            return [audit_record(r[0], r[1], r[2:]) for r in cursor.fetchall()]

    def forget_entry(self, namespace: str, entry: str) -> bool:
        with self._cursors.statement("forget an entry") as cursor:
            cursor.execute(Q["forget_entry"], {"namespace": namespace, "name": entry})
            return cursor.rowcount == 1

    def save_runtime_entry(self, namespace: str, name: str, spec: str, *, replace: bool) -> bool:
        query = Q["replace_runtime_entry"] if replace else Q["add_runtime_entry"]
        with self._cursors.transaction("store an entry") as cursor:
            cursor.execute(query, {"namespace": namespace, "name": name, "spec": spec})
            if cursor.rowcount != 1:
                return False
            cursor.execute(Q["bump_runtime_version"], {"namespace": namespace})
            return True

    def delete_runtime_entry(self, namespace: str, name: str) -> bool:
        with self._cursors.transaction("delete a stored entry") as cursor:
            cursor.execute(Q["delete_runtime_entry"], {"namespace": namespace, "name": name})
            if cursor.rowcount != 1:
                return False
            cursor.execute(Q["bump_runtime_version"], {"namespace": namespace})
            return True

    def runtime_entries(self, namespace: str) -> dict[str, str]:
        with self._cursors.read("load stored entries") as cursor:
            cursor.execute(Q["runtime_entries"], {"namespace": namespace})
            return {str(name): str(spec) for name, spec in cursor.fetchall()}

    def runtime_version(self, namespace: str) -> int:
        with self._cursors.read("read the stored entries' version") as cursor:
            cursor.execute(Q["runtime_version"], {"namespace": namespace})
            return int(cursor.fetchone()[0])

    def claim_extra(
        self,
        namespace: str,
        claims: Sequence[NewClaim],
        *,
        replica: Replica,
        reason: str,
    ) -> list[Claim]:
        """Claim windows outside a tick (trigger, backfill); inside the caller's transaction."""
        if not claims:
            return []
        with self._cursors.transaction("claim windows") as cursor:
            rows: list[DispatchRow] = [
                (
                    c.entry,
                    c.window,
                    Status.CLAIMED.value,
                    c.task_id,
                    c.task_name,
                    reason,
                    None,
                    None,
                )
                for c in claims
            ]
            now = _now(cursor)
            cursor.execute(
                Q["insert_dispatches"],
                {
                    "namespace": namespace,
                    "now": now,
                    "fenced": False,  # past windows, claimed on purpose
                    **replica_columns(replica),
                    **as_columns(rows),
                },
            )
            return [Claim(row[0], row[1], row[2], row[3], 1) for row in cursor.fetchall()]

    def start_execution(
        self,
        namespace: str,
        entry: str,
        window: datetime,
        *,
        worker: str,
        retries: int,
        lease: timedelta,
        exclusive: bool = False,
    ) -> Start:
        begin = self._cursors.transaction if exclusive else self._cursors.statement
        with begin("record the start of an execution") as cursor:
            if exclusive:
                # Starts of one forbid entry queue here, so two windows starting at once
                # each see the other's start (one statement's snapshot would not).
                cursor.execute(
                    Q["lock_entry_starts"], {"key": advisory_key("start", namespace, entry)}
                )
            cursor.execute(
                Q["start_execution"],
                {
                    "namespace": namespace,
                    "entry": entry,
                    "window": window,
                    "worker": worker,
                    "retries": retries,
                    "lease": lease,
                    "exclusive": exclusive,
                },
            )
            row = cursor.fetchone()
            return Start.UNKNOWN if row is None else Start(row[0])

    def renew_executions(
        self, namespace: str, runs: Sequence[LeasedRun], *, lease: timedelta
    ) -> int:
        if not runs:
            return 0
        with self._cursors.statement("renew execution leases") as cursor:
            cursor.execute(
                Q["renew_executions"],
                {
                    "namespace": namespace,
                    "lease": lease,
                    "entries": [r.entry for r in runs],
                    "windows": [r.window for r in runs],
                    "workers": [r.worker for r in runs],
                    "retries": [r.retries for r in runs],
                },
            )
            return cursor.rowcount

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
        with self._cursors.statement("record the end of an execution") as cursor:
            cursor.execute(
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
        self,
        namespace: str,
        key: str,
        *,
        owner: str,
        keep_for: timedelta,
        task_id: str | None,
    ) -> bool:
        with self._cursors.statement("claim an effect key") as cursor:
            cursor.execute(
                Q["claim_effect"],
                {
                    "namespace": namespace,
                    "key": key,
                    "owner": owner,
                    "task_id": task_id,
                    "keep_for": keep_for,
                },
            )
            return cursor.fetchone() is not None

    def release_effect(self, namespace: str, key: str, *, owner: str) -> bool:
        with self._cursors.statement("release an effect key") as cursor:
            cursor.execute(
                Q["release_effect"], {"namespace": namespace, "key": key, "owner": owner}
            )
            return bool(cursor.rowcount)

    def prune(self, namespace: str, before: datetime) -> int:
        """Delete old dispatch rows and replicas, and expired effect keys; in the caller's
        transaction. Returns the dispatch rows and effect keys deleted."""
        with self._cursors.transaction("prune") as cursor:
            cursor.execute(Q["prune_dispatches"], {"namespace": namespace, "before": before})
            deleted = cursor.rowcount
            cursor.execute(Q["prune_replicas"], {"namespace": namespace, "before": before})
            cursor.execute(Q["prune_audit"], {"namespace": namespace, "before": before})
            cursor.execute(Q["prune_effects"], {"namespace": namespace})
            return deleted + cursor.rowcount

    def release_claims(
        self,
        namespace: str,
        claims: Sequence[Claim],
        *,
        replica: Replica,
        timeout: timedelta,
    ) -> int:
        """Hand back claims never handed to the transport: one statement."""
        if not claims:
            return 0
        with self._cursors.statement("hand back unsent claims") as cursor:
            cursor.execute(
                Q["release_claims"],
                {
                    "ids": [c.id for c in claims],
                    "attempts": [c.attempts for c in claims],
                    "replica": replica.id,
                    "age": released_age(timeout),
                },
            )
            return cursor.rowcount
