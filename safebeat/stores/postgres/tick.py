"""The PostgreSQL statements beat runs: the tick, registering, publishes, heartbeats, pruning.

The tick is two messages of several statements each (one statement more when it takes
over stale claims: `_take_over`), so its cursor must bind parameters client-side
(`psycopg.ClientCursor`, or Django's default cursor, which is one); its arrays go as
array literals (`sql_common.array_literal`), cheaper to bind than lists. It sends
its own `BEGIN` and `COMMIT` inside them unless the cursor source holds a transaction
already; `register` and `prune` run inside one the source opens; the other writes are
one statement each (two for `record_publish` with both outcomes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from safebeat.identity import Replica
from safebeat.record_rules import states_after, take_over_page
from safebeat.records import (
    Claim,
    Definition,
    Reclaim,
    ReclaimPage,
    Registration,
    StaleClaim,
    Status,
    TickResult,
)
from safebeat.stores.decoding import state_of_row
from safebeat.stores.postgres.cursors import Cursor, Q, Statements, now_of
from safebeat.stores.pruning import in_batches
from safebeat.stores.sql_common import (
    FIRST_STALE,
    advisory_key,
    array_literal,
    as_array_literals,
    dispatch_rows,
    replica_columns,
)
from safebeat.stores.ticking import Heartbeat, Release, TickAdapter, TickCall

#: Definitions per statement when registering: a schedule of 100,000 entries is sent in
#: slices, so neither side builds every parameter of it at once.
REGISTER_SLICE = 5000


def _tick(
    cursor: Cursor, call: TickCall, *, limits: Mapping[str, str], own_transaction: bool = True
) -> TickResult | None:
    """One tick in two messages; None (nothing written) when another replica holds the lock.

    The first message takes the lock, reads the store's clock and loads the states; the
    second inserts the claims and skips, advances the states and finds the stale claims,
    of which a third takes over those of entries beat defines.
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
            "key": advisory_key("tick", call.namespace),
            "namespace": call.namespace,
            "names": array_literal(call.names),
        },
    )[1:]
    locked, now = lock_rows[0]
    if not locked:
        if own_transaction:
            cursor.execute("ROLLBACK")
        return None
    states = {row[0]: state_of_row(row) for row in state_rows}
    plan = call.planner(now, states)
    rows = dispatch_rows(plan)
    parts, params = [], {"namespace": call.namespace, "now": now, **replica_columns(call.replica)}
    if rows:
        parts.append(Q["insert_dispatches"])
        params.update(as_array_literals(rows), fenced=True)
    if plan.advances:
        parts.append(Q["advance_states"])
        params["advance_names"] = array_literal(plan.advances)
        params["advance_windows"] = array_literal(plan.advances.values())
    reclaim = call.reclaim
    if reclaim is not None:
        parts.append(Q["stale_claims"])
        after = reclaim.after or FIRST_STALE
        params.update(
            stale_before=now - reclaim.timeout,
            after_at=after.claimed_at,
            after_id=after.id,
            page=reclaim.page,
        )
    if own_transaction:
        parts.append("COMMIT")
    returned = _result_sets(cursor, ";\n".join(parts), params) if parts else []
    inserted = returned.pop(0) if rows else []
    claimed_status = Status.CLAIMED.value  # an enum's value is slow to read row by row
    claimed = [
        Claim(row[0], row[1], row[2], row[3], 1) for row in inserted if row[4] == claimed_status
    ]
    if reclaim is None:
        return TickResult(now, states_after(states, plan), claimed, [], plan)
    reclaimed, page = _take_over(cursor, reclaim, returned.pop(0), params)
    return TickResult(now, states_after(states, plan), claimed, reclaimed, plan, page)


def _take_over(
    cursor: Cursor, reclaim: Reclaim, stale: Sequence[Any], params: Mapping[str, Any]
) -> tuple[list[Claim], ReclaimPage]:
    """Take over those of the page of `stale` claims (id, entry, claimed_at) that
    `take_over_page` chooses; one statement, and none when there are none."""
    ids, page = take_over_page(reclaim, [StaleClaim(*row) for row in stale])
    if not ids:
        return [], page
    names = ("now", "stale_before", "replica", "host", "pid")
    cursor.execute(Q["take_over"], {"ids": ids, **{name: params[name] for name in names}})
    return [Claim(*row) for row in cursor.fetchall()], page


class _RegistrationTurn:
    """A namespace's registration lock, a transaction-scoped advisory lock taken before a
    registration's first write. Each slice locks the rows it writes until the commit, and
    two replicas whose slices hold the same names in another order or another cut (two
    releases with different entries) would each wait for rows the other holds; taking
    turns, the second waits for the first's commit instead. A restart that changes nothing
    writes nothing and takes no turn, so replicas starting together still read at once."""

    def __init__(self, cursor: Cursor, namespace: str) -> None:
        self._cursor, self._key = cursor, advisory_key("register", namespace)
        self._held = False

    def take(self) -> bool:
        """Take the lock, waiting for another registration to commit; False if held."""
        if self._held:
            return False
        self._cursor.execute(Q["lock_registration"], {"key": self._key})
        self._held = True
        return True


def _stored_digests(cursor: Cursor, namespace: str, part: Sequence[Definition]) -> dict[str, str]:
    cursor.execute(
        Q["registered_digests"],
        {"namespace": namespace, "names": array_literal(d.name for d in part)},
    )
    return dict(cursor.fetchall())


def _register_slice(
    cursor: Cursor,
    namespace: str,
    part: Sequence[Definition],
    replica: Replica,
    now: datetime,
    *,
    turn: _RegistrationTurn,
) -> dict[str, str]:
    """Register `part`: read its stored digests, write what differs; return the changed
    entries with their former digests."""
    before = _stored_digests(cursor, namespace, part)
    new = [d for d in part if before.get(d.name) != d.digest]
    if new and turn.take():  # another replica may have registered meanwhile: read again
        before = _stored_digests(cursor, namespace, part)
        new = [d for d in part if before.get(d.name) != d.digest]
    changed = [d for d in new if d.name in before]
    # The changed entries go to the insert too (where they conflict, it writes nothing):
    # one deleted since the read is registered again.
    for statement, definitions in (("update_entries", changed), ("insert_entries", new)):
        if definitions:
            cursor.execute(
                Q[statement],
                {
                    "namespace": namespace,
                    "now": now,
                    "replica": replica.id,
                    "names": array_literal(d.name for d in definitions),
                    "schedules": array_literal(d.schedule for d in definitions),
                    "digests": array_literal(d.digest for d in definitions),
                },
            )
    return {d.name: before[d.name] for d in changed}


def _result_sets(cursor: Cursor, statements: str, params: Mapping[str, Any]) -> list[list[Any]]:
    """Send several statements as one message; return the rows of those that return rows."""
    cursor.execute(statements, params)
    results = []
    while True:
        if cursor.description is not None:
            results.append(cursor.fetchall())
        if not cursor.nextset():
            return results


class TickStatements(TickAdapter, Statements):
    """`TickStore` on PostgreSQL (`migrate` and `close` are the connection owner's)."""

    def _tick(self, call: TickCall) -> TickResult | None:
        return self._cursors.tick(
            "tick",
            lambda cursor, own: _tick(cursor, call, limits=self._limits, own_transaction=own),
        )

    def clock(self) -> datetime:
        with self._cursors.read("read the clock") as cursor:
            return now_of(cursor)

    def register(
        self, namespace: str, definitions: Sequence[Definition], replica: Replica
    ) -> Registration:
        """Insert new entries, update changed ones; inside the caller's transaction. Each
        slice reads its stored digests first and writes only what differs, so a restart
        with unchanged entries is one read per slice; the first write waits for the
        namespace's registration turn (`_RegistrationTurn`)."""
        with self._cursors.transaction("register entries") as cursor:
            now = now_of(cursor)
            turn = _RegistrationTurn(cursor, namespace)
            changed: dict[str, str] = {}
            for start in range(0, len(definitions), REGISTER_SLICE):
                part = definitions[start : start + REGISTER_SLICE]
                changed.update(_register_slice(cursor, namespace, part, replica, now, turn=turn))
            return Registration(changed)

    def _record_publish(
        self, namespace: str, sent: Sequence[int], failed: Mapping[int, str]
    ) -> None:
        """One statement each for the sent and the failed claims."""
        with self._cursors.statement("record publishing") as cursor:
            if sent:
                cursor.execute(Q["mark_sent"], {"ids": list(sent)})
            if failed:
                cursor.execute(
                    Q["mark_failed"], {"ids": list(failed), "errors": list(failed.values())}
                )

    def _release_claims(self, namespace: str, release: Release) -> int:
        """One statement."""
        with self._cursors.statement("hand back unsent claims") as cursor:
            cursor.execute(
                Q["release_claims"],
                {
                    "ids": release.ids,
                    "attempts": list(release.attempts.values()),
                    "replica": release.replica,
                    "age": release.age,
                },
            )
            return cursor.rowcount

    #: `_heartbeat` applies a delta (`Heartbeat.removed`): beat sends one after a change.
    heartbeat_deltas = True

    def _heartbeat(self, beat: Heartbeat) -> bool:
        with self._cursors.statement("heartbeat") as cursor:
            alive = {"namespace": beat.namespace, "replica": beat.replica.id}
            if beat.removed is not None:
                changed = json.dumps(dict(beat.definitions or {}))
                removed = array_literal(sorted(beat.removed))
                delta = {"version": beat.version, "changed": changed, "removed": removed}
                cursor.execute(Q["patch_definitions"], {**alive, **delta})
                return bool(cursor.rowcount)
            if beat.definitions is None:
                cursor.execute(Q["alive"], alive)
                return bool(cursor.rowcount)
            cursor.execute(
                Q["heartbeat"],
                {
                    "namespace": beat.namespace,
                    **replica_columns(beat.replica),
                    "version": beat.version,
                    "definitions": beat.definitions_json(),
                },
            )
            return True

    def forget_replica(self, namespace: str, replica: Replica) -> None:
        with self._cursors.statement("forget a replica") as cursor:
            cursor.execute(Q["forget_replica"], {"namespace": namespace, "replica": replica.id})

    def prune(self, namespace: str, before: datetime, *, budget: timedelta | None = None) -> int:
        """Delete old dispatch rows in batches (`pruning.in_batches`), then old replicas and
        audit records and expired effect keys; each batch and the rest in a transaction of
        its own (the caller's, if it holds one). Returns the dispatch rows and effect keys
        deleted."""

        def delete_batch(batch: int) -> int:
            with self._cursors.transaction("prune") as cursor:
                params = {"namespace": namespace, "before": before, "batch": batch}
                cursor.execute(Q["prune_dispatches"], params)
                return int(cursor.rowcount)

        deleted = in_batches(delete_batch, budget=budget)
        with self._cursors.transaction("prune") as cursor:
            cursor.execute(Q["prune_replicas"], {"namespace": namespace, "before": before})
            cursor.execute(Q["prune_audit"], {"namespace": namespace, "before": before})
            cursor.execute(Q["prune_effects"], {"namespace": namespace})
            return deleted + cursor.rowcount
