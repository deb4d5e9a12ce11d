"""The `django://` store on PostgreSQL runs the `postgresql://` store's statements on Django's
connection: the same round trips, the same lock, and the connection left as Django expects."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from safebeat.errors import StoreUnavailable
from safebeat.identity import Replica, task_id_for
from safebeat.stores.django import DjangoStore
from safebeat.stores.postgres import PostgresStore
from safebeat.stores.protocols import Definition, EntryState, NewClaim, Reclaim, Status, TickPlan
from tests import djangosite, pgconn
from tests.registering import registered

pytestmark = [pytest.mark.django, pytest.mark.postgres]

REPLICA = Replica("host-a", 101, "aaaaaa")
OTHER = Replica("host-b", 202, "bbbbbb")
IDLE = psycopg.pq.TransactionStatus.IDLE


@pytest.fixture
def alias(request: pytest.FixtureRequest) -> str:
    return djangosite.alias_for(request, "postgres")


@pytest.fixture
def connection(alias: str) -> Any:
    """This thread's Django connection of the PostgreSQL alias."""
    from django.db import connections

    return connections[alias]


@pytest.fixture
def pg_store(connection: Any) -> Iterator[PostgresStore]:
    """A postgresql:// store on the database of the Django alias."""
    store = PostgresStore(
        pgconn.from_django(connection.settings_dict), lock_timeout=timedelta(seconds=1)
    )
    yield store
    store.close()


@contextmanager
def protocol_syncs(conn: psycopg.Connection[Any], folder: Path) -> Iterator[list[int]]:
    """Count the Query and Sync messages the client sends (one per round trip) in the block,
    with libpq's trace, as test_postgres_store does; the count is appended when it ends."""
    trace = folder / f"trace-{uuid.uuid4().hex[:8]}.txt"
    counted: list[int] = []
    with trace.open("w") as sink:
        conn.pgconn.trace(sink.fileno())
        try:
            yield counted
        finally:
            conn.pgconn.untrace()
    counted.append(len(re.findall(r"\tF\t\d+\t(?:Sync|Query)\b", trace.read_text())))


def claim_all(names: list[str], states: Mapping[str, EntryState], seconds: int) -> TickPlan:
    windows = {n: states[n].anchor + timedelta(seconds=seconds) for n in names}
    return TickPlan(
        claims=[NewClaim(n, w, f"id-{n}-{seconds}", "t.run") for n, w in windows.items()],
        advances=windows,
    )


def assert_left_in_autocommit(connection: Any) -> None:
    """Django sees autocommit and no atomic block, and the session has no transaction open."""
    assert connection.get_autocommit()
    assert not connection.in_atomic_block
    assert connection.connection.info.transaction_status == IDLE


def wire(store: PostgresStore | DjangoStore) -> psycopg.Connection[Any]:
    """The psycopg connection a store talks through (Django's, for the Django store)."""
    if isinstance(store, PostgresStore):
        return store._connection()
    from django.db import connections

    connection = connections[store.alias]
    connection.ensure_connection()
    return connection.connection  # type: ignore[no-any-return]


def test_round_trips_equal_the_postgres_stores_however_many_are_due(
    connection: Any, pg_store: PostgresStore, tmp_path: Path
) -> None:
    """A claiming tick and the record of what was published cost django:// exactly the round
    trips they cost postgresql://, for 1 window or 2,000: two per tick, one to record."""
    names = [f"e{i}" for i in range(2000)]
    counts: dict[str, list[tuple[int, int]]] = {}
    for store in (pg_store, DjangoStore(f"django://{connection.alias}")):
        kind = store.display_url.split(":")[0]
        namespace = f"rt-{uuid.uuid4().hex[:8]}"
        definitions = [Definition(n, "every 1s", "d") for n in names]
        states = registered(store, namespace, definitions, REPLICA)
        for size in (1, 2000):
            plan = claim_all(names[:size], states, size)
            raw = wire(store)
            with protocol_syncs(raw, tmp_path) as tick_syncs:
                result = store.tick(
                    namespace,
                    names[:size],
                    lambda now, s, p=plan: p,
                    replica=REPLICA,
                    reclaim=Reclaim(names[:size], timedelta(seconds=30)),
                )
            assert result is not None
            assert len(result.claimed) == size
            with protocol_syncs(raw, tmp_path) as record_syncs:
                store.record_publish(namespace, [c.id for c in result.claimed], {})
            counts.setdefault(kind, []).append((tick_syncs[0], record_syncs[0]))
        assert {r.status for r in store.history(namespace, limit=5000)} == {Status.SENT}
    assert counts["django"] == counts["postgresql"] == [(2, 1), (2, 1)]
    assert_left_in_autocommit(connection)


def test_the_connection_is_left_in_autocommit_whatever_ends_a_tick(
    connection: Any, pg_store: PostgresStore, namespace: str
) -> None:
    """After a claiming tick, a tick that found the lock held by a postgresql:// replica
    (the same key) and a tick whose planner raised, Django's connection has no transaction
    open and nothing of the failed ticks was written."""
    store = DjangoStore(f"django://{connection.alias}")
    state = registered(store, namespace, [Definition("a", "every 1s", "d")], REPLICA)["a"]
    window = state.anchor + timedelta(seconds=1)
    plan = TickPlan(
        claims=[NewClaim("a", window, task_id_for(namespace, "a", window), "t.run")],
        advances={"a": window},
    )

    inside, release = threading.Event(), threading.Event()

    def holding(now: datetime, states: Mapping[str, EntryState]) -> TickPlan:
        inside.set()
        release.wait(10)
        return TickPlan()

    holder = threading.Thread(
        target=pg_store.tick, args=(namespace, ["a"], holding), kwargs={"replica": OTHER}
    )
    holder.start()
    try:
        assert inside.wait(10)
        assert store.tick(namespace, ["a"], lambda now, s: plan, replica=REPLICA) is None
        assert_left_in_autocommit(connection)
    finally:
        release.set()
        holder.join(10)

    def broken(now: datetime, states: Mapping[str, EntryState]) -> TickPlan:
        raise ZeroDivisionError("planner bug")

    with pytest.raises(ZeroDivisionError):
        store.tick(namespace, ["a"], broken, replica=REPLICA)
    assert_left_in_autocommit(connection)
    assert store.history(namespace) == []

    result = store.tick(namespace, ["a"], lambda now, s: plan, replica=REPLICA)
    assert result is not None
    assert [c.window for c in result.claimed] == [window]
    assert_left_in_autocommit(connection)
    assert [r.window for r in pg_store.history(namespace)] == [window]


def test_inside_the_callers_atomic_block_writes_commit_or_roll_back_with_it(
    connection: Any, pg_store: PostgresStore, namespace: str
) -> None:
    """Inside `transaction.atomic` (ATOMIC_REQUESTS, a caller's transaction) a tick and the
    record of its publishing are savepoints of that transaction: they vanish when it rolls
    back and are seen by others once it commits."""
    from django.db import transaction

    store = DjangoStore(f"django://{connection.alias}")
    state = registered(store, namespace, [Definition("a", "every 1s", "d")], REPLICA)["a"]
    window = state.anchor + timedelta(seconds=1)
    plan = TickPlan(
        claims=[NewClaim("a", window, task_id_for(namespace, "a", window), "t.run")],
        advances={"a": window},
    )

    class Abandon(Exception):
        """Rolls the caller's transaction back."""

    def tick_then_abandon() -> None:
        with transaction.atomic(using=connection.alias):
            result = store.tick(namespace, ["a"], lambda now, s: plan, replica=REPLICA)
            assert result is not None
            assert len(result.claimed) == 1
            store.record_publish(namespace, [result.claimed[0].id], {})
            assert connection.in_atomic_block
            raise Abandon

    with pytest.raises(Abandon):
        tick_then_abandon()
    assert_left_in_autocommit(connection)
    assert pg_store.history(namespace) == []
    assert pg_store.states(namespace)["a"].last_window is None

    with transaction.atomic(using=connection.alias):
        result = store.tick(namespace, ["a"], lambda now, s: plan, replica=REPLICA)
        assert result is not None
        store.record_publish(namespace, [c.id for c in result.claimed], {})
        assert pg_store.history(namespace) == []  # not committed yet
    [row] = pg_store.history(namespace)
    assert (row.window, row.status) == (window, Status.SENT)
    assert_left_in_autocommit(connection)


def test_a_frozen_tick_loses_its_session_and_the_next_call_reconnects(
    alias: str, pg_store: PostgresStore, namespace: str
) -> None:
    """The tick arms idle_in_transaction_session_timeout = lock_timeout: a replica frozen
    while it holds the lock loses its session, another takes the lock within seconds, and
    the frozen one gets StoreUnavailable, then works again on Django's fresh connection."""
    frozen = DjangoStore(f"django://{alias}", lock_timeout=timedelta(seconds=1))
    state = registered(frozen, namespace, [Definition("a", "every 1s", "d")], REPLICA)["a"]
    window = state.anchor + timedelta(seconds=1)
    plan = TickPlan(
        claims=[NewClaim("a", window, task_id_for(namespace, "a", window), "t.run")],
        advances={"a": window},
    )
    inside, wake = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def freezing(now: datetime, states: Mapping[str, EntryState]) -> TickPlan:
        inside.set()
        wake.wait(20)
        return plan

    def replica() -> None:
        from django.db import connections

        try:
            frozen.tick(namespace, ["a"], freezing, replica=REPLICA)
        except StoreUnavailable as exc:
            seen["error"] = exc
        try:
            seen["again"] = frozen.tick(namespace, ["a"], lambda n, s: plan, replica=REPLICA)
        finally:
            connections[alias].close()

    thread = threading.Thread(target=replica)
    thread.start()
    assert inside.wait(10)
    started = time.monotonic()
    while (result := pg_store.tick(namespace, ["a"], lambda n, s: plan, replica=OTHER)) is None:
        assert time.monotonic() - started < 10, "the frozen replica held the lock too long"
        time.sleep(0.05)
    wake.set()
    thread.join(20)
    assert [c.window for c in result.claimed] == [window]
    assert isinstance(seen.get("error"), StoreUnavailable)
    again = seen.get("again")
    assert again is not None
    assert again.claimed == []  # type: ignore[attr-defined]
    [row] = pg_store.history(namespace)
    assert row.replica == OTHER.id


def test_server_side_binding_in_options_still_ticks(connection: Any, namespace: str) -> None:
    """With OPTIONS server_side_binding (a cursor that cannot send several statements with
    parameters in one message) the store still ticks in its two messages."""
    options = connection.settings_dict["OPTIONS"]
    connection.close()
    options["server_side_binding"] = True
    connection.features.__dict__.pop("uses_server_side_binding", None)  # a cached_property
    try:
        store = DjangoStore(f"django://{connection.alias}")
        state = registered(store, namespace, [Definition("a", "every 1s", "d")], REPLICA)
        with connection.cursor() as cursor:
            assert not isinstance(cursor.cursor, psycopg.ClientCursor)
        result = store.tick(
            namespace, ["a"], lambda now, s: claim_all(["a"], state, 1), replica=REPLICA
        )
        assert result is not None
        assert len(result.claimed) == 1
        assert_left_in_autocommit(connection)
    finally:
        connection.close()
        del options["server_side_binding"]
        connection.features.__dict__.pop("uses_server_side_binding", None)


def test_statements_go_through_djangos_cursor_and_keep_hostile_names_as_data(
    connection: Any, namespace: str
) -> None:
    """The store's SQL runs through Django's cursor wrapper (it shows in the query log);
    names made to break out of quotes or array literals come back byte for byte."""
    from django.test.utils import CaptureQueriesContext

    store = DjangoStore(f"django://{connection.alias}")
    names = ["x'); DROP TABLE safebeat_dispatch; --", 'a","b', "{x}", "%(namespace)s", "$$"]
    states = registered(store, namespace, [Definition(n, "every 1s", "d") for n in names], REPLICA)
    with CaptureQueriesContext(connection) as queries:
        result = store.tick(
            namespace, names, lambda now, s: claim_all(names, states, 1), replica=REPLICA
        )
    assert result is not None
    assert sorted(c.entry for c in result.claimed) == sorted(names)
    assert any("pg_try_advisory_xact_lock" in q["sql"] for q in queries.captured_queries)
    assert sorted({r.entry for r in store.history(namespace)}) == sorted(names)
    store.heartbeat(namespace, REPLICA, "1.0", dict.fromkeys(names, "d"))
    [record] = store.replicas(namespace)
    assert dict(record.definitions) == dict.fromkeys(names, "d")
