"""SQL (and Redis key) injection through entry names, namespaces and effect keys is inert.

Every value a user or an attacker controls (entry names, from `beat_schedule` or from a
django-celery-beat row an admin typed; the namespace; keys given to `safebeat.claim`;
task and worker names) reaches the stores as bound parameters or Lua arguments, never as
text spliced into a statement. PostgreSQL's tick sends several statements in one message
with client-side binding, so quoting there is what stands between a name and the
database: these tests push quotes, backslashes, comment markers, dollar quotes, array
braces, placeholders and Redis hash tags through every store operation, and check that
each comes back byte for byte and that the tables, and another namespace, survive.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta

import psycopg
import pytest

from safebeat.errors import StoreError
from safebeat.identity import Replica, task_id_for
from safebeat.records import Pause
from safebeat.stores.postgres import PostgresStore
from safebeat.stores.protocols import (
    Definition,
    EntryState,
    LeasedRun,
    NewClaim,
    Outcome,
    Reclaim,
    RunEnd,
    Start,
    Status,
    Store,
    TickPlan,
)
from safebeat.stores.redis import RedisStore
from safebeat.stores.sqlite import SqliteStore

TABLES = ("safebeat_dispatch", "safebeat_entry", "safebeat_replica", "safebeat_effect")
PAYLOADS = [
    "x'); DROP TABLE safebeat_dispatch; --",
    'x"); DROP TABLE safebeat_entry; --',
    "'; DELETE FROM safebeat_dispatch WHERE ''='",
    "\\'; DROP TABLE safebeat_dispatch; --",
    "$$; DROP TABLE safebeat_dispatch; $$",
    "x' OR '1'='1",
    'a","b',  # an element of a PostgreSQL array literal breaking out
    "{x}",
    "NULL",
    "%(namespace)s",  # a psycopg placeholder
    "{namespace}",
    "?",
    "x\nDROP TABLE safebeat_dispatch;\n",
    "/* */--",
    "ns}:claim:*",  # a Redis hash tag closing early, and a key pattern
    "safebeat:{other}:lock",
    "ünïcödé ☃ 🗓",
]
REPLICA = Replica("host'; DROP TABLE safebeat_replica; --", 101, "aaaaaa")
SECOND = timedelta(seconds=1)


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def store(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[Store]:
    """A migrated store of each kind that runs SQL or scripts on user-controlled names."""
    opened: Store
    if request.param == "sqlite":
        opened = SqliteStore(f"sqlite:///{tmp_path}/injection.sqlite3")
    elif request.param == "postgres":
        opened = PostgresStore(request.getfixturevalue("pg_url"))
    else:
        opened = RedisStore(request.getfixturevalue("redis_url"))
    opened.migrate()
    yield opened
    opened.close()


def tables_left(store: Store, request: pytest.FixtureRequest) -> set[str]:
    """The safebeat tables that exist in the store's database (all of them, for Redis)."""
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as conn:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return {name for (name,) in rows} & set(TABLES)
    if isinstance(store, PostgresStore):
        with psycopg.connect(request.getfixturevalue("pg_url")) as conn:
            return {
                name
                for name in TABLES
                if conn.execute("SELECT to_regclass(%s)", (name,)).fetchone() != (None,)
            }
    return set(TABLES)


def claim_everything(store: Store, namespace: str, names: list[str]) -> list[int]:
    """One tick claiming the next window of every entry; return the claimed row ids."""

    def plan(now: datetime, states: Mapping[str, EntryState]) -> TickPlan:
        claims = [
            NewClaim(
                name,
                states[name].anchor + SECOND,
                task_id_for(namespace, name, states[name].anchor + SECOND),
                name,  # the task name is user text too
            )
            for name in names
        ]
        return TickPlan(claims, (), {c.entry: c.window for c in claims})

    result = store.tick(
        namespace, names, plan, replica=REPLICA, reclaim=Reclaim(names, timedelta(hours=1))
    )
    assert result is not None
    assert sorted(c.entry for c in result.claimed) == sorted(names)
    return [claim.id for claim in result.claimed]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_hostile_names_round_trip_as_data_and_the_tables_survive(
    store: Store, payload: str, namespace: str, request: pytest.FixtureRequest
) -> None:
    """A name like `x'); DROP TABLE safebeat_dispatch; --` is stored and read back unchanged."""
    bystander = f"{namespace}-bystander"
    store.register(bystander, [Definition("report", "every 1s", "d")], REPLICA)
    claim_everything(store, bystander, ["report"])
    hostile_namespace = f"{namespace}{payload}"
    names = [payload, f"{payload}-2"]
    store.register(hostile_namespace, [Definition(n, payload, payload) for n in names], REPLICA)
    states = store.states(hostile_namespace)
    assert set(states) == set(names)
    assert {s.schedule for s in states.values()} == {payload}

    ids = claim_everything(store, hostile_namespace, names)
    store.record_publish(hostile_namespace, ids[:1], {ids[1]: payload})
    rows = store.history(hostile_namespace, limit=10)
    assert sorted(r.entry for r in rows) == sorted(names)
    assert {r.task_name for r in rows} == set(names)
    assert {r.status for r in rows} == {Status.SENT, Status.FAILED}
    assert [r.error for r in rows if r.status is Status.FAILED] == [payload]
    assert [r.entry for r in store.history(hostile_namespace, payload, limit=10)] == [payload]

    assert store.set_paused(hostile_namespace, payload, Pause(True))
    assert store.states(hostile_namespace)[payload].paused
    window = states[payload].anchor + 5 * SECOND
    extra = NewClaim(payload, window, task_id_for(hostile_namespace, payload, window), payload)
    [claimed] = store.claim_extra(hostile_namespace, [extra], replica=REPLICA, reason="trigger")
    assert claimed.entry == payload

    run = LeasedRun(payload, window, payload, 0)
    start = store.start_execution(hostile_namespace, run, lease=timedelta(hours=1))
    assert start is Start.RUN
    store.finish_execution(hostile_namespace, run, RunEnd(Outcome.SUCCESS, SECOND))
    [finished] = [r for r in store.history(hostile_namespace, payload) if r.window == window]
    assert (finished.worker, finished.outcome) == (payload, Outcome.SUCCESS)

    store.heartbeat(hostile_namespace, REPLICA, payload, {payload: payload})
    [replica] = store.replicas(hostile_namespace)
    assert (replica.host, replica.version, dict(replica.definitions)) == (
        REPLICA.host,
        payload,
        {payload: payload},
    )

    key = f"effect:{payload}"
    keep = timedelta(hours=1)
    assert store.claim_effect(hostile_namespace, key, owner=payload, keep_for=keep, task_id=payload)
    assert not store.claim_effect(hostile_namespace, key, owner="x", keep_for=keep, task_id=None)
    assert not store.release_effect(hostile_namespace, key, owner="someone else")
    assert store.release_effect(hostile_namespace, key, owner=payload)
    assert store.prune(hostile_namespace, states[payload].anchor - timedelta(days=1)) == 0

    assert tables_left(store, request) == set(TABLES)
    assert [r.entry for r in store.history(bystander)] == ["report"]
    assert set(store.states(bystander)) == {"report"}


def test_a_nul_byte_in_a_name_is_stored_or_refused_with_a_store_error(
    store: Store, namespace: str, request: pytest.FixtureRequest
) -> None:
    """PostgreSQL text cannot hold NUL: such a name is a StoreError there, and data elsewhere."""
    name = "before\x00after'); DROP TABLE safebeat_entry; --"
    definition = Definition(name, "every 1s", "d")
    if isinstance(store, PostgresStore):
        with pytest.raises(StoreError):
            store.register(namespace, [definition], REPLICA)
    else:
        store.register(namespace, [definition], REPLICA)
        assert set(store.states(namespace)) == {name}
    assert tables_left(store, request) == set(TABLES)
