"""The store contract (`safebeat.testing.stores.StoreContract`), run unchanged against
every backend: memory, SQLite, PostgreSQL, Redis (single, Cluster, Sentinel), and the
Django store on PostgreSQL, MariaDB and SQLite; plus the cases only safebeat's own backends
can run, which write rows with each backend's driver."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from safebeat.beat.planning import plan_tick
from safebeat.config import Config
from safebeat.entries import compile_entry
from safebeat.records import Pause
from safebeat.stores.memory import MemoryStore
from safebeat.stores.postgres import PostgresStore
from safebeat.stores.protocols import AuditAction, AuditEvent, EntryState, NewClaim, Store, TickPlan
from safebeat.stores.redis import RedisStore
from safebeat.stores.redis.base import key_prefix
from safebeat.stores.sqlite import SqliteStore
from safebeat.testing.stores import REPLICA, SECOND, StoreContract, StoreFactory
from tests import storevariants

#: Stores whose tick lock the server takes back from a frozen holder after the lock
#: timeout (an idle-in-transaction timeout, a TTL): other replicas tick meanwhile. The
#: in-memory and SQLite stores keep the lock for as long as its holder plans.
LOCK_TAKEN_BACK = {
    "postgres",
    "redis",
    "redis-cluster",
    "redis-sentinel",
    "django-postgres",
    "django-mariadb",
}


#: 10000-01-01T00:00:00Z in microseconds since the epoch: what `pause --until
#: 9999-12-31T23:59:59-12:00` stored before the limits, beyond any Python datetime.
AFTER_9999_US = 253402300800 * 10**6


AFTER_9999 = "10000-01-01 11:59:59+00"


def poison(store: Store, namespace: str, entry: str, row_id: int) -> None:
    """With the store's own driver, write what an older safebeat (or a hand) could leave:
    entry `entry`'s pause ending after the year 9999 (where the server holds no such
    instant, MySQL/MariaDB, a zero date as its anchor), and history row `row_id` sent after
    the year 9999 (through Django, where an instant that cannot be read may come back as
    None: claimed then, or at a zero date on MySQL/MariaDB)."""
    if isinstance(store, MemoryStore):
        pytest.skip("the memory store keeps Python objects: it holds no row it cannot read")
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as conn:
            conn.execute(
                "UPDATE safebeat_entry SET paused = 1, paused_until = ? "
                "WHERE namespace = ? AND name = ?",
                (AFTER_9999_US, namespace, entry),
            )
            conn.execute(
                "UPDATE safebeat_dispatch SET sent_at = ? WHERE id = ?", (AFTER_9999_US, row_id)
            )
        return
    if isinstance(store, RedisStore):
        client = store._connection()
        prefix = key_prefix(namespace)
        client.hset(
            f"{prefix}:paused", entry, json.dumps({"until": str(AFTER_9999_US), "note": None})
        )
        client.hset(f"{prefix}:row:{row_id}", "sent_at", str(AFTER_9999_US))
        return
    if isinstance(store, PostgresStore):
        cursors = psycopg.connect(store._url, autocommit=True)
    else:
        from django.db import connections

        cursors = connections[store.alias]
    vendor = getattr(cursors, "vendor", "postgresql")
    placeholder = "%s"
    with cursors.cursor() as cursor:
        if vendor == "mysql":
            cursor.execute("SET SESSION sql_mode = ''")  # let the server keep a zero date
            entry_set = "anchor = '0000-00-00 00:00:00'"
            row_set = "claimed_at = '0000-00-00 00:00:00'"
        elif vendor == "sqlite":  # Django's text form of an instant
            entry_set = "paused = 1, paused_until = '10000-01-01 11:59:59'"
            row_set = "claimed_at = '10000-01-01 11:59:59'"
        else:
            entry_set = f"paused = true, paused_until = '{AFTER_9999}'"
            row_set = f"sent_at = '{AFTER_9999}'"
        cursor.execute(
            f"UPDATE safebeat_entry SET {entry_set} "  # noqa: S608 - fixed text above
            f"WHERE namespace = {placeholder} AND name = {placeholder}",
            [namespace, entry],
        )
        cursor.execute(
            f"UPDATE safebeat_dispatch SET {row_set} WHERE id = {placeholder}",  # noqa: S608
            [row_id],
        )
        if vendor == "mysql":
            cursor.execute("SET SESSION sql_mode = DEFAULT")
    if isinstance(store, PostgresStore):
        cursors.close()


class TestBuiltinStores(StoreContract):
    """Every contract case on each of the nine store variants."""

    @pytest.fixture(params=storevariants.VARIANTS)
    def open_store(
        self, request: pytest.FixtureRequest, tmp_path: object
    ) -> Iterator[StoreFactory]:
        """A factory of store instances that share one backing store (like replicas do)."""
        opened: list[Store] = []
        memory = MemoryStore()

        def factory() -> Store:
            store: Store
            if request.param == "memory":
                store = memory
            else:
                store = storevariants.open_variant(
                    request, request.param, tmp_path, busy_timeout=timedelta(seconds=0.2)
                )
            store.migrate()
            opened.append(store)
            return store

        yield factory
        for store in opened:
            store.close()

    @pytest.fixture
    def namespace(self, namespace: str) -> str:
        """The suite's namespace, carrying the run's tag (so Redis keys are swept)."""
        return namespace

    @pytest.fixture
    def tick_lock_taken_back(self, request: pytest.FixtureRequest) -> bool:
        return request.node.callspec.params["open_store"] in LOCK_TAKEN_BACK

    @pytest.fixture
    def namespaces_share_tick_lock(self, request: pytest.FixtureRequest) -> bool:
        return request.node.callspec.params["open_store"] in {"sqlite", "django-sqlite"}

    def test_a_state_that_cannot_be_read_back_puts_only_its_entry_aside(
        self, open_store: StoreFactory, namespace: str
    ) -> None:
        """A state and a history row written with the driver as no Python datetime can hold
        them (a pause ending after the year 9999, as an older safebeat stored it), and an audit
        record of that pause: `states`, `history`, `audit` and the tick keep working. The state
        reads as unreadable, saying why, and the planner gives it no window while the other
        entry ticks on; a resume rewrites the pause and the entry reads back again."""
        store = open_store()
        entries = {
            name: compile_entry(
                name,
                {"task": "tasks.run", "schedule": 0.1},
                app_timezone=timezone.utc,
                config=Config(),
            )
            for name in ("victim", "other")
        }
        store.register(namespace, [e.definition for e in entries.values()], REPLICA)
        [triggered] = store.claim_extra(
            namespace,
            [NewClaim("victim", store.clock(), "task-1", "tasks.run")],
            replica=REPLICA,
            reason="trigger",
        )
        store.record_publish(namespace, [triggered.id], {})
        after_9999 = datetime.fromisoformat("9999-12-31T23:59:59-12:00")
        store.record_audit(
            namespace, AuditEvent("old", AuditAction.PAUSE, "victim", (after_9999,), "x")
        )
        poison(store, namespace, "victim", triggered.id)

        states = open_store().states(namespace)
        assert states["victim"].unreadable is not None
        assert states["other"].unreadable is None
        [row] = store.history(namespace, "victim")
        assert row.id == triggered.id
        assert row.error is not None
        assert row.error.startswith("unreadable row")
        [record] = store.audit(namespace)
        assert record.windows == ()
        assert record.note is not None
        assert "unreadable" in record.note

        def planner(now: datetime, states: dict[str, EntryState]) -> TickPlan:
            return plan_tick(entries, states, now, namespace=namespace, retry_after=SECOND)

        claimed: list[str] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(claimed) < 3:
            result = store.tick(namespace, ["victim", "other"], planner, replica=REPLICA)
            if result is not None:
                assert result.states["victim"].unreadable is not None
                claimed += [c.entry for c in result.claimed]
            time.sleep(0.12)
        assert claimed
        assert set(claimed) == {"other"}

        assert store.set_paused(namespace, "victim", Pause(False))
        if store.states(namespace)["victim"].unreadable is None:  # a pause was the poison
            result = store.tick(namespace, ["victim"], planner, replica=REPLICA)
            assert result is None or result.states["victim"].unreadable is None
