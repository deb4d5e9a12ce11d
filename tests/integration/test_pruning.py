"""Pruning a backlog bigger than one batch on the SQL stores: one batch per pass whose
budget is spent, every old row gone after enough passes, the recent ones kept."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from safebeat.stores.postgres import PostgresStore
from safebeat.stores.protocols import Store
from safebeat.stores.pruning import PRUNE_BATCH
from safebeat.stores.sqlite import SqliteStore, path_of

OLD = datetime(2025, 1, 1, tzinfo=timezone.utc)
#: Two batches and a half of rows before the retention, and a few after it.
BACKLOG = 2 * PRUNE_BATCH + PRUNE_BATCH // 2
RECENT = 10
CUTOFF = OLD + timedelta(minutes=BACKLOG)

POSTGRES_ROWS = """
INSERT INTO safebeat_dispatch
    (namespace, entry, window_at, status, replica, host, pid, claimed_at)
SELECT %(namespace)s, 'a', w, 'skipped', 'r', 'h', 1, w
FROM generate_series(0, %(rows)s - 1) AS n,
     LATERAL (SELECT %(old)s::timestamptz + n * interval '1 minute' AS w) AS t
"""
SQLITE_ROWS = """
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :rows)
INSERT INTO safebeat_dispatch
    (namespace, entry, window_at, status, replica, host, pid, claimed_at)
SELECT :namespace, 'a', :old + i * 60000000, 'skipped', 'r', 'h', 1, :old + i * 60000000
FROM n
"""


def on_postgres(url: str, namespace: str) -> tuple[Store, Callable[[], int]]:
    with psycopg.connect(url, autocommit=True) as conn:
        params = {"namespace": namespace, "rows": BACKLOG + RECENT, "old": OLD}
        conn.execute(POSTGRES_ROWS, params)

    def count() -> int:
        with psycopg.connect(url) as conn:
            query = "SELECT count(*) FROM safebeat_dispatch WHERE namespace = %s"
            row = conn.execute(query, [namespace]).fetchone()
            return int(row[0]) if row else 0

    return PostgresStore(url), count


def on_sqlite(url: str, namespace: str) -> tuple[Store, Callable[[], int]]:
    store = SqliteStore(url)
    store.migrate()
    old = int(OLD.timestamp() * 1_000_000)
    with sqlite3.connect(path_of(url)) as conn:
        params = {"namespace": namespace, "rows": BACKLOG + RECENT, "old": old}
        conn.execute(SQLITE_ROWS, params)

    def count() -> int:
        with sqlite3.connect(path_of(url)) as conn:
            query = "SELECT count(*) FROM safebeat_dispatch WHERE namespace = ?"
            return int(conn.execute(query, [namespace]).fetchone()[0])

    return store, count


@pytest.mark.parametrize(
    "backend", [pytest.param("postgres", marks=pytest.mark.postgres), "sqlite"]
)
def test_a_backlog_bigger_than_a_batch_is_pruned_across_passes(
    request: pytest.FixtureRequest, backend: str, namespace: str
) -> None:
    """With its budget spent at once, each pass deletes one batch, oldest first, and
    returns; three passes delete the two and a half batches of old rows, and keep the
    rows claimed after the retention."""
    if backend == "postgres":
        store, count = on_postgres(request.getfixturevalue("pg_url"), namespace)
    else:
        store, count = on_sqlite(request.getfixturevalue("sqlite_url"), namespace)
    try:
        assert count() == BACKLOG + RECENT
        spent = timedelta(0)
        assert store.prune(namespace, CUTOFF, budget=spent) == PRUNE_BATCH
        assert count() == BACKLOG + RECENT - PRUNE_BATCH
        assert store.prune(namespace, CUTOFF, budget=spent) == PRUNE_BATCH
        assert store.prune(namespace, CUTOFF, budget=spent) == PRUNE_BATCH // 2
        assert count() == RECENT
        assert store.prune(namespace, CUTOFF, budget=spent) == 0
    finally:
        store.close()


@pytest.mark.postgres
def test_without_a_budget_a_backlog_is_pruned_whole_in_batches(pg_url: str, namespace: str) -> None:
    """`safebeat prune` gives no budget: every old row goes in one call, batch by batch."""
    store, count = on_postgres(pg_url, namespace)
    try:
        assert store.prune(namespace, CUTOFF) == BACKLOG
        assert count() == RECENT
    finally:
        store.close()
