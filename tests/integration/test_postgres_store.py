"""What only PostgreSQL can show: frozen lock holders, migrations, errors of a real server."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from safebeat.errors import StoreError, StoreUnavailable
from safebeat.identity import Replica, task_id_for
from safebeat.records import LeasedRun, Outcome, RunEnd, Start
from safebeat.stores.postgres import MIGRATIONS, PostgresStore
from safebeat.stores.postgres.cursors import Q
from safebeat.stores.protocols import Definition, EntryState, NewClaim, Reclaim, Status, TickPlan
from safebeat.stores.sql_common import array_literal
from tests import runscope, services
from tests.registering import registered

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
    state = registered(frozen, namespace, [Definition("a", "every 1s", "d")], FROZEN)["a"]
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
    wake.set()
    thread.join(20)
    assert busy > 0
    assert [c.window for c in result.claimed] == [window]
    # The stall is the server's doing, not a time measured here: it ended the frozen
    # session at its idle-in-transaction timeout, which the store sets to lock_timeout.
    assert isinstance(outcome.get("error"), StoreUnavailable)
    assert "idle-in-transaction timeout" in str(outcome["error"])
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
    assert versions == [MIGRATIONS[-1].version] * 4
    with psycopg.connect(fresh_db) as conn:
        recorded = conn.execute("SELECT version, name FROM safebeat_schema_version").fetchall()
    assert recorded == [(m.version, m.name) for m in MIGRATIONS]


def test_schema_version_reports_zero_before_migrating(fresh_db: str) -> None:
    """schema_version() is 0 on a fresh database and the latest version after migrate()."""
    store = PostgresStore(fresh_db)
    assert store.schema_version() == 0
    store.migrate()
    assert store.schema_version() == MIGRATIONS[-1].version
    store.close()


def test_protocol_syncs_per_tick_do_not_grow_with_the_batch(
    pg_url: str, namespace: str, tmp_path: Path
) -> None:
    """Claiming 1 or 2,000 windows sends the same number of protocol syncs: one batch, no loop."""
    store = PostgresStore(pg_url)
    names = [f"e{i}" for i in range(2000)]
    states = registered(store, namespace, [Definition(n, "every 1s", "d") for n in names], ALIVE)
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


def scan_rows(plan: dict[str, Any]) -> int:
    """Rows the scans of an EXPLAIN (ANALYZE, FORMAT JSON) plan read: kept and filtered out."""
    own = 0
    if "Scan" in plan["Node Type"]:
        own = plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)
    return own + sum(scan_rows(child) for child in plan.get("Plans", []))


def test_a_take_over_page_reads_a_page_whatever_plan_a_table_without_statistics_gets(
    fresh_db: str, namespace: str
) -> None:
    """With three pages of stale claims among sent rows, in a table never analyzed, the
    stale-claims statement reads about two pages of index rows (the claim time of the
    page's last row, then the page), from the oldest or from a place: never every stale
    claim."""
    PostgresStore(fresh_db).migrate()
    page = 200
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute(
            """INSERT INTO safebeat_dispatch (namespace, entry, window_at, status, task_id,
                   task_name, replica, host, pid, claimed_at)
               SELECT %(namespace)s, 'e' || g, now() - g * interval '1 second',
                      CASE WHEN g %% 50 = 0 THEN 'claimed' ELSE 'sent' END, 't' || g, 't',
                      'r', 'h', 1, now() - interval '1 hour' - g * interval '1 second'
               FROM generate_series(1, 3 * %(page)s * 50) AS g""",
            {"namespace": namespace, "page": page},
        )
        cursor = psycopg.ClientCursor(conn)
        now = cursor.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        params = {"namespace": namespace, "now": now, "stale_before": now, "page": page}
        oldest = datetime(1970, 1, 1, tzinfo=timezone.utc)
        first = cursor.execute(Q["stale_claims"], {**params, "after_at": oldest, "after_id": 0})
        last_id, _, last_at = first.fetchall()[-1]
        for after_at, after_id in ((oldest, 0), (last_at, last_id)):
            args = {**params, "after_at": after_at, "after_id": after_id}
            [[[explained]]] = cursor.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + Q["stale_claims"], args
            ).fetchall()
            assert explained["Plan"]["Actual Rows"] == page
            assert scan_rows(explained["Plan"]) <= 2 * page + 2


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
        states = store.states(namespace)
        again = store.register(
            namespace,
            [
                Definition(n, "every 1s", "d2" if n in {"e00000", names[-1]} else "d1")
                for n in names
            ],
            ALIVE,
        )
        digests = {name: state.digest for name, state in store.states(namespace).items()}
    finally:
        store.close()
    assert set(states) == set(names)
    assert len({state.anchor for state in states.values()}) == 1
    assert first.changed == {}
    assert again.changed == {"e00000": "d1", names[-1]: "d1"}
    assert digests == {n: "d2" if n in {"e00000", names[-1]} else "d1" for n in names}


#: A replica that registers its entries over and over, until the test stops it mid-way.
REGISTERING_REPLICA = """
import sys
from datetime import timedelta
from safebeat.identity import Replica
from safebeat.stores.protocols import Definition
from safebeat.stores.postgres import PostgresStore

url, namespace, count, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
store = PostgresStore(url, lock_timeout=timedelta(seconds=timeout))
definitions = [Definition(f"e{i}", "every 1s", "d1") for i in range(count)]
print(store._connection().info.backend_pid, flush=True)  # its server session, for the test
while True:
    store.register(namespace, definitions, Replica("frozen-host", 1, "f00000"))
"""


def session_of(admin: psycopg.Connection[Any], backend: int) -> tuple[str, str] | None:
    """The (state, last query) of the server session `backend`, if it is still open."""
    row = admin.execute(
        "SELECT state, query FROM pg_stat_activity WHERE pid = %s", [backend]
    ).fetchone()
    return None if row is None else (str(row[0]), str(row[1]))


def stop_inside_register(process: subprocess.Popen[bytes], admin: Any, backend: int) -> None:
    """SIGSTOP `process` at a moment its session is idle inside register's transaction,
    after reading the digests or the upsert: the replica is frozen holding whatever
    register locked."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        os.kill(process.pid, signal.SIGSTOP)
        # The signal takes effect a moment later: wait until the process has stopped, then
        # until a statement it sent just before (a COMMIT) has reached its session.
        os.waitpid(process.pid, os.WUNTRACED)
        time.sleep(0.05)
        session = session_of(admin, backend)
        after_upsert = session is not None and (
            "INSERT INTO safebeat_entry" in session[1]
            or "SELECT name, digest FROM safebeat_entry" in session[1]
        )
        if after_upsert and session is not None and session[0] == "idle in transaction":
            return
        os.kill(process.pid, signal.SIGCONT)
        time.sleep(0.002)
    raise AssertionError("never caught the replica inside register")


def test_a_replica_frozen_inside_register_does_not_stop_the_others(
    pg_url: str, namespace: str
) -> None:
    """A replica frozen inside register (its upsert done, no commit) locks no unchanged row,
    so another replica's ticks go on at once, and the server ends the frozen session."""
    names = [f"e{i}" for i in range(20)]
    alive = PostgresStore(pg_url, lock_timeout=timedelta(seconds=1))
    states = registered(alive, namespace, [Definition(n, "every 1s", "d1") for n in names], ALIVE)
    process = subprocess.Popen(
        # Frozen, it keeps its session for 5 s: long enough to see the ticks end meanwhile.
        [sys.executable, "-c", REGISTERING_REPLICA, pg_url, namespace, str(len(names)), "5"],
        stdout=subprocess.PIPE,
    )
    admin = psycopg.connect(pg_url, autocommit=True)
    try:
        assert process.stdout is not None
        backend = int(process.stdout.readline())
        stop_inside_register(process, admin, backend)
        for second in (1, 2, 3):
            window = states["e0"].anchor + timedelta(seconds=second)
            plan = TickPlan(
                claims=[NewClaim(n, window, task_id_for(namespace, n, window), "t") for n in names],
                advances=dict.fromkeys(names, window),
            )
            result = alive.tick(namespace, names, lambda n, s, p=plan: p, replica=ALIVE)
            assert result is not None
            assert len(result.claimed) == len(names)
            # Done while the frozen transaction still holds what it locked: it waited for
            # none of it (a wait would end only with that session, or fail at 1 s).
            frozen_session = session_of(admin, backend)
            assert frozen_session is not None, "the frozen session ended first"
            assert frozen_session[0] == "idle in transaction", frozen_session
        deadline = time.monotonic() + 15
        while session_of(admin, backend) is not None:  # idle_in_transaction timeout
            assert time.monotonic() < deadline, "the frozen register kept its session"
            time.sleep(0.05)
    finally:
        process.kill()
        os.kill(process.pid, signal.SIGCONT)
        process.wait(10)
        admin.close()
        alive.close()


def test_migrate_waits_a_bounded_time_for_a_frozen_migrator(pg_url: str) -> None:
    """With another session frozen while holding the migration lock, migrate gives up after
    about lock_timeout with an error saying so, instead of waiting for ever."""
    from safebeat.stores.sql_common import advisory_key

    frozen = psycopg.connect(pg_url)
    frozen.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_key("migrate")])
    store = PostgresStore(pg_url, lock_timeout=timedelta(seconds=1))
    outcome: dict[str, object] = {}

    def migrate() -> None:
        started = time.monotonic()
        try:
            outcome["version"] = store.migrate()
        except StoreError as exc:
            outcome["error"] = exc
        outcome["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=migrate)
    try:
        thread.start()
        thread.join(15)
        assert not thread.is_alive(), "migrate waited for the frozen migrator"
    finally:
        frozen.rollback()
        frozen.close()
        thread.join(15)
        store.close()
    assert isinstance(outcome.get("error"), StoreError)
    assert "lock" in str(outcome["error"])
    # It waited for the lock (the server's lock_timeout, not a time measured here, ended the
    # wait: the join above bounds it loosely, a slow machine only makes it longer).
    assert float(outcome["seconds"]) > 0.5  # type: ignore[arg-type]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    texts=st.lists(
        st.none()
        | st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=12)
    ),
    instants=st.lists(st.none() | st.datetimes(timezones=st.just(timezone.utc)), max_size=4),
)
def test_array_literals_read_back_as_the_values_they_were_made_of(
    pg_url: str, texts: list[str | None], instants: list[datetime | None]
) -> None:
    """The tick sends its arrays as literals: quotes, backslashes, braces, commas, blanks,
    the word NULL and the empty list all come back as they were, through a client-side
    binding cursor like the tick's."""
    with psycopg.connect(pg_url, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        row = conn.execute(
            "SELECT %(texts)s::text[], %(instants)s::timestamptz[]",
            {"texts": array_literal(texts), "instants": array_literal(instants)},
        ).fetchone()
    assert row == (texts, instants)


def entry_scans(plan: dict[str, Any]) -> list[str]:
    """The node types of a JSON plan (and its subplans) that read safebeat_entry."""
    found = [plan["Node Type"]] if plan.get("Relation Name") == "safebeat_entry" else []
    for child in plan.get("Plans", []):
        found.extend(entry_scans(child))
    return found


@pytest.mark.parametrize("statement", ["registered_digests", "load_states"])
def test_reading_a_slice_of_entries_probes_the_key_and_compiles_nothing(
    pg_url: str, namespace: str, statement: str
) -> None:
    """A slice of 5,000 names (a register slice, a claim round) is read by one key probe per
    name, not by a scan of the namespace, which the planner prefers for `name = ANY(...)`
    and which made each slice cost what the whole namespace does; and inside safebeat's
    bounded transaction the server does not JIT-compile it (rated above jit_above_cost,
    compiling cost more than running)."""
    from safebeat.stores.postgres.statements import REGISTER_SLICE, Q, tick_limits

    with psycopg.connect(pg_url, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        conn.execute(
            "INSERT INTO safebeat_entry (namespace, name, schedule, digest, anchor, defined_at,"
            " registered_by) SELECT %(namespace)s, 'e' || lpad(i::text, 6, '0'), 'every 1s',"
            " 'd', now(), now(), 'r' FROM generate_series(1, 20000) AS i",
            {"namespace": namespace},
        )
        conn.execute("ANALYZE safebeat_entry")
        names = [f"e{i:06d}" for i in range(1, 20000, 4)][:REGISTER_SLICE]
        limits = tick_limits(timedelta(seconds=5), timedelta(seconds=60))
        with conn.transaction():
            conn.execute(Q["bound_transaction"], limits)
            row = conn.execute(
                f"EXPLAIN (FORMAT JSON) {Q[statement]}",
                {"namespace": namespace, "names": array_literal(names)},
            ).fetchone()
    assert row is not None
    (explained,) = row[0]
    assert set(entry_scans(explained["Plan"])) == {"Index Scan"}, explained["Plan"]
    assert "JIT" not in explained


def test_inserting_a_slice_of_new_entries_reads_no_entry(pg_url: str, namespace: str) -> None:
    """A first registration inserts each slice of 5,000 without joining it to the namespace
    (which the planner hashed whole, once per slice: a first start of 1,000,000 entries
    grew with the square of it); a name inserted meanwhile is left as it is."""
    from safebeat.stores.postgres.statements import REGISTER_SLICE, Q

    with psycopg.connect(pg_url, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        conn.execute(
            "INSERT INTO safebeat_entry (namespace, name, schedule, digest, anchor, defined_at,"
            " registered_by) SELECT %(namespace)s, 'e' || lpad(i::text, 6, '0'), 'every 1s',"
            " 'd', now(), now(), 'r' FROM generate_series(1, 20000) AS i",
            {"namespace": namespace},
        )
        conn.execute("ANALYZE safebeat_entry")
        names = [f"n{i:06d}" for i in range(REGISTER_SLICE)]
        params = {
            "namespace": namespace,
            "now": datetime.now(timezone.utc),
            "replica": "r2",
            "names": array_literal(names),
            "schedules": array_literal(["every 2s"] * len(names)),
            "digests": array_literal(["d2"] * len(names)),
        }
        row = conn.execute(f"EXPLAIN (FORMAT JSON) {Q['insert_entries']}", params).fetchone()
        assert row is not None
        (explained,) = row[0]
        assert entry_scans(explained["Plan"]) == ["ModifyTable"], explained["Plan"]
        conn.execute(
            Q["insert_entries"],
            {
                **params,
                "names": array_literal(["e000001", "n000001"]),
                "schedules": array_literal(["every 2s"] * 2),
                "digests": array_literal(["d2"] * 2),
            },
        )
        stored = dict(
            conn.execute(
                "SELECT name, digest FROM safebeat_entry WHERE namespace = %(namespace)s"
                " AND name IN ('e000001', 'n000001')",
                {"namespace": namespace},
            ).fetchall()
        )
    assert stored == {"e000001": "d", "n000001": "d2"}


@pytest.mark.parametrize("statement", ["start", "renew", "finish"])
def test_worker_statements_blocked_on_a_row_lock_fail_fast(
    pg_url: str, namespace: str, statement: str
) -> None:
    """The worker hook's statements are bounded as the tick's are: one blocked on a row
    lock another session holds fails after lock_timeout (StoreError), instead of waiting
    while the run's lease lapses."""
    store = PostgresStore(pg_url, lock_timeout=timedelta(milliseconds=500))
    window = store.clock().replace(microsecond=0) - timedelta(hours=1)
    result = store.tick(namespace, [], lambda n, s: claim(namespace, window), replica=ALIVE)
    assert result is not None
    [claimed] = result.claimed
    store.record_publish(namespace, [claimed.id], {})
    run = LeasedRun("a", window, "w1@host:1", 0)
    assert store.start_execution(namespace, run, lease=timedelta(minutes=1)) is Start.RUN
    calls = {
        "start": lambda: store.start_execution(
            namespace, LeasedRun("a", window, "w2@host:2", 0), lease=timedelta(minutes=1)
        ),
        "renew": lambda: store.renew_executions(namespace, [run], lease=timedelta(minutes=1)),
        "finish": lambda: store.finish_execution(
            namespace, run, RunEnd(Outcome.SUCCESS, timedelta(seconds=1))
        ),
    }
    with psycopg.connect(pg_url) as holder:
        holder.execute("SELECT 1 FROM safebeat_dispatch WHERE id = %s FOR UPDATE", [claimed.id])
        started = time.monotonic()
        with pytest.raises(StoreError, match="lock timeout"):
            calls[statement]()
        took = time.monotonic() - started
        holder.rollback()
    assert took < 5, f"{statement} waited {took:.1f}s for the row lock"
    # Once the lock is gone the store answers again, on the same connection.
    assert store.renew_executions(namespace, [run], lease=timedelta(minutes=1)) == 1
    store.close()
