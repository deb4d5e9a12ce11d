"""What only PostgreSQL can show: frozen lock holders, migrations, errors of a real server."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from safebeat.errors import StoreError, StoreUnavailable
from safebeat.identity import Replica, task_id_for
from safebeat.stores.base import Definition, EntryState, NewClaim, Reclaim, Status, TickPlan
from safebeat.stores.postgres import MIGRATIONS, PostgresStore
from tests import runscope, services

pytestmark = pytest.mark.postgres

FROZEN = Replica("frozen-host", 1, "f00000")
ALIVE = Replica("alive-host", 2, "a11111")


@pytest.fixture
def fresh_db(pg_admin_url: str) -> Iterator[str]:
    """A database of this test's own, not migrated."""
    name = runscope.database(f"fresh_{uuid.uuid4().hex[:10]}")
    url = services.create_database(pg_admin_url, name)
    yield url
    services.drop_database(pg_admin_url, name)


def claim(namespace: str, window: datetime) -> TickPlan:
    return TickPlan(
        claims=[NewClaim("a", window, task_id_for(namespace, "a", window), "t.run")],
        advances={"a": window},
    )


def test_frozen_lock_holder_stalls_others_briefly_and_claims_nothing(
    pg_url: str, namespace: str
) -> None:
    """A replica frozen inside its tick loses the lock after lock_timeout; its claim never lands."""
    frozen = PostgresStore(pg_url, lock_timeout=timedelta(seconds=1))
    alive = PostgresStore(pg_url, lock_timeout=timedelta(seconds=1))
    state = frozen.register(namespace, [Definition("a", "every 1s", "d")], FROZEN).states["a"]
    window = state.anchor + timedelta(seconds=1)
    inside, wake = threading.Event(), threading.Event()
    outcome: dict[str, BaseException] = {}

    def freezing_planner(now: datetime, states: dict[str, EntryState]) -> TickPlan:
        inside.set()
        wake.wait(20)  # the process is stopped here, holding the tick transaction
        return claim(namespace, window)

    def run_frozen() -> None:
        try:
            frozen.tick(namespace, ["a"], freezing_planner, replica=FROZEN)
        except StoreUnavailable as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run_frozen)
    thread.start()
    assert inside.wait(10)
    started = time.monotonic()
    busy = 0
    while (
        result := alive.tick(namespace, ["a"], lambda n, s: claim(namespace, window), replica=ALIVE)
    ) is None:
        busy += 1
        assert time.monotonic() - started < 10, "the frozen replica held the lock too long"
        time.sleep(0.05)
    stalled = time.monotonic() - started
    wake.set()
    thread.join(20)
    assert busy > 0
    assert 0.5 < stalled < 5
    assert [c.window for c in result.claimed] == [window]
    assert isinstance(outcome.get("error"), StoreUnavailable)
    [row] = alive.history(namespace, "a")
    assert (row.replica, row.status) == (ALIVE.id, Status.CLAIMED)
    # The frozen replica reconnects on its next call and sees the other's claim.
    again = frozen.tick(namespace, ["a"], lambda n, s: claim(namespace, window), replica=FROZEN)
    assert again is not None
    assert again.claimed == []
    frozen.close()
    alive.close()


def test_unreachable_server_is_unavailable_without_leaking_the_password() -> None:
    """A closed port raises StoreUnavailable whose message hides the password."""
    port = services.free_port()
    store = PostgresStore(f"postgresql://app:hunter2@127.0.0.1:{port}/app", connect_timeout=2)
    with pytest.raises(StoreUnavailable) as caught:
        store.clock()
    message = str(caught.value)
    assert "hunter2" not in message
    assert "postgresql://app:***@127.0.0.1" in message
    assert isinstance(caught.value.__cause__, psycopg.Error)


def test_missing_schema_says_to_migrate(fresh_db: str, namespace: str) -> None:
    """Using a store that was never migrated is a StoreError that says to run `safebeat migrate`."""
    store = PostgresStore(fresh_db)
    with pytest.raises(StoreError, match="safebeat migrate"):
        store.register(namespace, [Definition("a", "every 1s", "d")], ALIVE)
    store.close()


def test_replicas_migrating_at_once_agree(fresh_db: str) -> None:
    """Several replicas migrating a fresh database at the same moment all end at one version."""
    versions: list[int] = []
    errors: list[BaseException] = []

    def migrate() -> None:
        store = PostgresStore(fresh_db)
        try:
            versions.append(store.migrate())
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=migrate) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert versions == [len(MIGRATIONS)] * 4
    with psycopg.connect(fresh_db) as conn:
        recorded = conn.execute("SELECT version, name FROM safebeat_schema_version").fetchall()
    assert recorded == [(m.version, m.name) for m in MIGRATIONS]


def test_schema_version_reports_zero_before_migrating(fresh_db: str) -> None:
    """schema_version() is 0 on a fresh database and the latest version after migrate()."""
    store = PostgresStore(fresh_db)
    assert store.schema_version() == 0
    store.migrate()
    assert store.schema_version() == len(MIGRATIONS)
    store.close()


def test_protocol_syncs_per_tick_do_not_grow_with_the_batch(
    pg_url: str, namespace: str, tmp_path: Path
) -> None:
    """Claiming 1 or 2,000 windows sends the same number of protocol syncs: one batch, no loop."""
    store = PostgresStore(pg_url)
    names = [f"e{i}" for i in range(2000)]
    states = store.register(
        namespace, [Definition(n, "every 1s", "d") for n in names], ALIVE
    ).states
    syncs = []
    for size in (1, 2000):
        batch = names[:size]
        window = {n: states[n].anchor + timedelta(seconds=size) for n in batch}
        plan = TickPlan(
            claims=[NewClaim(n, window[n], f"id-{n}-{size}", "t") for n in batch], advances=window
        )
        trace = tmp_path / f"trace-{size}.txt"
        with trace.open("w") as sink:
            conn = store._connection()
            conn.pgconn.trace(sink.fileno())
            result = store.tick(
                namespace,
                batch,
                lambda now, s, p=plan: p,
                replica=ALIVE,
                reclaim=Reclaim(batch, timedelta(seconds=30)),
            )
            conn.pgconn.untrace()
        assert result is not None
        assert len(result.claimed) == size
        syncs.append(len(re.findall(r"\tF\t\d+\t(?:Sync|Query)\b", trace.read_text())))
    store.close()
    assert syncs[0] == syncs[1] <= 4


def test_a_schedule_larger_than_one_register_slice_registers_whole_and_atomically(
    pg_url: str, namespace: str
) -> None:
    """12,000 definitions go in slices of 5,000, in one transaction at one instant."""
    from safebeat.stores.postgres.statements import REGISTER_SLICE

    count = 2 * REGISTER_SLICE + 2000
    names = [f"e{i:05d}" for i in range(count)]
    store = PostgresStore(pg_url)
    try:
        first = store.register(namespace, [Definition(n, "every 1s", "d1") for n in names], ALIVE)
        again = store.register(
            namespace,
            [
                Definition(n, "every 1s", "d2" if n in {"e00000", names[-1]} else "d1")
                for n in names
            ],
            ALIVE,
        )
    finally:
        store.close()
    assert set(first.states) == set(names)
    assert len({state.anchor for state in first.states.values()}) == 1
    assert first.changed == {}
    assert again.changed == {"e00000": "d1", names[-1]: "d1"}
    assert set(again.states) == set(names)
