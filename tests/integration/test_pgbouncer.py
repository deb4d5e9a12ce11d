"""The PostgreSQL store behind PgBouncer in transaction mode, two server connections shared.

In transaction pooling, consecutive transactions of one client may run on different server
connections, and each server connection serves many clients: nothing may outlive a
transaction. These tests pin what the store relies on for that (docs/stores.md, "Behind
PgBouncer"); `tests/acceptance/test_pgbouncer.py` runs real beats, a worker and the CLI
through the pooler.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

import psycopg
import pytest

from safebeat.errors import StoreUnavailable
from safebeat.identity import Replica, task_id_for
from safebeat.stores.postgres import PostgresStore
from safebeat.stores.protocols import Definition, EntryState, NewClaim, TickPlan
from tests import pgconn
from tests.registering import registered
from tests.services import PgBouncer

pytestmark = pytest.mark.postgres

REPLICAS = [Replica(f"host-{n}", n, f"{n:06x}") for n in range(3)]
#: Server settings the store changes inside its transactions only.
TRANSACTION_SETTINGS = ("idle_in_transaction_session_timeout", "lock_timeout", "statement_timeout")


def pooled(pgbouncer: PgBouncer, pg_url: str) -> str:
    """The URL of the test database through the pooler."""
    return pgbouncer.url(pgconn.params(pg_url)["dbname"])


def open_both_server_connections(url: str) -> None:
    """Open the pool's two server connections (two transactions at once); the pooler then
    hands them out in turn, so consecutive transactions run on different ones."""
    clients = [psycopg.connect(url, autocommit=True, prepare_threshold=None) for _ in range(2)]
    pids = set()
    for client in clients:
        client.execute("BEGIN")
        pids.add(client.execute("SELECT pg_backend_pid()").fetchone())
    for client in clients:
        client.execute("COMMIT")
        client.close()
    assert len(pids) == 2


def claim(namespace: str, window: datetime) -> TickPlan:
    return TickPlan(
        claims=[NewClaim("a", window, task_id_for(namespace, "a", window), "t.run")],
        advances={"a": window},
    )


def test_stores_sharing_two_server_connections_tick_in_turn(
    pgbouncer: PgBouncer, pg_url: str, namespace: str
) -> None:
    """Three stores on two pooled server connections, each calling the same statements
    well past psycopg's prepare threshold: every tick takes the lock and claims its window
    (the lock ends with the transaction, no statement is prepared on the server), and no
    timeout the store set is left on a server connection for the next client."""
    url = pooled(pgbouncer, pg_url)
    open_both_server_connections(url)
    stores = [PostgresStore(url) for _ in REPLICAS]
    definitions = [Definition("a", "every 1s", "d")]
    state = registered(stores[0], namespace, definitions, REPLICAS[0])["a"]
    window = state.anchor
    for _ in range(8):
        claims = []
        # Consecutive ticks, so on alternate server connections: a lock left on one would
        # make the next tick find it busy.
        for store, replica in zip(stores, REPLICAS, strict=True):
            window += timedelta(seconds=1)
            result = store.tick(
                namespace, ["a"], lambda n, s, w=window: claim(namespace, w), replica=replica
            )
            assert result is not None, "the tick lock was busy with no tick running"
            assert [c.window for c in result.claimed] == [window]
            claims.append(result.claimed[0].id)
        for store, replica in zip(stores, REPLICAS, strict=True):
            store.register(namespace, definitions, replica)
            assert store.states(namespace)["a"].last_window == window
            store.record_publish(namespace, claims, {})
    assert len(stores[0].history(namespace, "a", limit=100)) == 24
    with psycopg.connect(pg_url, autocommit=True) as direct:
        defaults = [direct.execute(f"SHOW {name}").fetchone() for name in TRANSACTION_SETTINGS]
    clients = [psycopg.connect(url, autocommit=True, prepare_threshold=None) for _ in range(3)]
    try:
        for client in clients:  # in turn on both server connections
            seen = [client.execute(f"SHOW {name}").fetchone() for name in TRANSACTION_SETTINGS]
            assert seen == defaults
    finally:
        for client in clients:
            client.close()
    for store in stores:
        store.close()


def test_a_frozen_tick_behind_pgbouncer_frees_the_lock_and_its_server_connection(
    pgbouncer: PgBouncer, pg_url: str, namespace: str
) -> None:
    """A store frozen inside its tick holds one of the pooler's two server connections;
    the server ends that session after lock_timeout, the lock goes with it, another store
    claims the window, and the frozen one claims nothing and works again on its next call."""
    url = pooled(pgbouncer, pg_url)
    frozen = PostgresStore(url, lock_timeout=timedelta(seconds=1))
    alive = PostgresStore(url, lock_timeout=timedelta(seconds=1))
    definitions = [Definition("a", "every 1s", "d")]
    state = registered(frozen, namespace, definitions, REPLICAS[0])["a"]
    window = state.anchor + timedelta(seconds=1)
    inside, wake = threading.Event(), threading.Event()
    outcome: dict[str, BaseException] = {}

    def freezing_planner(now: datetime, states: dict[str, EntryState]) -> TickPlan:
        inside.set()
        wake.wait(20)  # the process is stopped here, holding the tick transaction
        return claim(namespace, window)

    def run_frozen() -> None:
        try:
            frozen.tick(namespace, ["a"], freezing_planner, replica=REPLICAS[0])
        except StoreUnavailable as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run_frozen)
    thread.start()
    assert inside.wait(10)
    started = time.monotonic()
    while (
        result := alive.tick(
            namespace, ["a"], lambda n, s: claim(namespace, window), replica=REPLICAS[1]
        )
    ) is None:
        assert time.monotonic() - started < 10, "the frozen store held the lock too long"
        time.sleep(0.05)
    wake.set()
    thread.join(20)
    assert [c.window for c in result.claimed] == [window]
    assert isinstance(outcome.get("error"), StoreUnavailable), outcome
    [row] = alive.history(namespace, "a")
    assert row.replica == REPLICAS[1].id
    again = frozen.tick(
        namespace, ["a"], lambda n, s: claim(namespace, window), replica=REPLICAS[0]
    )
    assert again is not None
    assert again.claimed == []
    frozen.close()
    alive.close()
