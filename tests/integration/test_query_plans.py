"""The plans of the reads a tick makes inside its lock, on a namespace with a long history:
each reaches the dispatch table through an index condition on the entry and reads the row it
needs, however many skipped rows the entry has; none scans the table. PostgreSQL's executed
plans are read back (EXPLAIN ANALYZE); SQLite's chosen ones (EXPLAIN QUERY PLAN)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from safebeat.identity import Replica
from safebeat.stores.postgres import PostgresStore
from safebeat.stores.postgres.cursors import Q
from safebeat.stores.protocols import Definition
from safebeat.stores.sql_common import array_literal
from safebeat.stores.sqlite import SqliteStore, path_of
from safebeat.stores.sqlite.connection import Q as SQLITE_Q
from tests.registering import registered

REPLICA = Replica("plan-host", 1, "p00000")
ENTRIES = [f"entry-{n:02}" for n in range(20)]
#: Skipped windows after each entry's one sent window (a paused entry's history).
SKIPS = 2000
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)

#: Each entry: one sent window, then SKIPS skipped ones, a minute apart.
LONG_HISTORY = """
INSERT INTO safebeat_dispatch
    (namespace, entry, window_at, status, task_id, replica, host, pid, claimed_at, sent_at)
SELECT %(namespace)s, e.name, w.at, CASE WHEN n = 0 THEN 'sent' ELSE 'skipped' END,
       CASE WHEN n = 0 THEN 'task-' || e.name END, 'r', 'h', 1, w.at,
       CASE WHEN n = 0 THEN w.at END
FROM unnest(%(names)s::text[]) AS e(name)
CROSS JOIN generate_series(0, %(skips)s) AS n
CROSS JOIN LATERAL (SELECT %(t0)s::timestamptz + n * interval '1 minute' AS at) AS w
"""


@pytest.fixture
def long_history(pg_url: str, namespace: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection to a database where `namespace` has ENTRIES with long histories."""
    store = PostgresStore(pg_url)
    registered(store, namespace, [Definition(n, "every 1m", "d") for n in ENTRIES], REPLICA)
    store.close()
    with psycopg.connect(pg_url, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        params = {"namespace": namespace, "names": ENTRIES, "skips": SKIPS, "t0": T0}
        conn.execute(LONG_HISTORY, params)
        conn.execute("ANALYZE safebeat_dispatch")
        conn.execute("SET jit = off")  # as bound_transaction sets it for a tick
        yield conn


def nodes_of(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A plan node and every node under it."""
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes_of(child)


def dispatch_scans(
    conn: psycopg.Connection[Any], sql: str, params: Mapping[str, Any], *, analyze: bool = True
) -> list[Any]:
    """The nodes of `sql`'s plan (executed, with `analyze`) that read safebeat_dispatch."""
    options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
    row = conn.execute(f"EXPLAIN ({options}) {sql}", params).fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]
    found = [n for n in nodes_of(plan) if n.get("Relation Name") == "safebeat_dispatch"]
    assert found, "the plan does not read safebeat_dispatch"
    return found


@pytest.mark.postgres
@pytest.mark.parametrize("query", ["load_states", "all_states"])
def test_state_reads_probe_the_entry_past_its_skipped_rows(
    long_history: psycopg.Connection[Any], namespace: str, query: str
) -> None:
    """Loading the states of entries with 2,000 skipped windows after their newest sent one
    is an index probe per entry that reads no skipped row: no sequential scan, every
    dispatch scan is conditioned on the entry, and no scan throws rows away."""
    params = {
        "namespace": namespace,
        "names": array_literal(ENTRIES),
        "now": datetime.now(timezone.utc),
    }
    for scan in dispatch_scans(long_history, Q[query], params):
        assert scan["Node Type"] in ("Index Scan", "Index Only Scan", "Bitmap Heap Scan"), scan
        assert "entry" in scan.get("Index Cond", scan.get("Recheck Cond", "")), scan
        assert scan.get("Rows Removed by Filter", 0) == 0, scan
        assert scan["Actual Rows"] <= 1, scan


@pytest.mark.postgres
def test_the_stale_claims_page_never_scans_the_history(
    long_history: psycopg.Connection[Any], namespace: str
) -> None:
    """The take-over's page of stale claims reads the dispatch table through its partial
    indexes of unsent and running rows, never the history itself."""
    now = T0 + timedelta(days=30)
    params = {
        "namespace": namespace,
        "now": now,
        "stale_before": now - timedelta(seconds=30),
        "after_at": datetime(1970, 1, 1, tzinfo=timezone.utc),
        "after_id": 0,
        "page": 100,
    }
    partial = {"safebeat_dispatch_unsent", "safebeat_dispatch_running"}
    for scan in dispatch_scans(long_history, Q["stale_claims"], params):
        # By the index itself, or a bitmap of it: the planner's choice, either bounded.
        assert scan["Node Type"] in ("Index Scan", "Index Only Scan", "Bitmap Heap Scan"), scan
        used = {node.get("Index Name") for node in nodes_of(scan) if "Index Name" in node}
        assert used, scan
        assert used <= partial, scan


@pytest.mark.postgres
def test_a_prune_batch_reads_only_what_it_deletes(
    long_history: psycopg.Connection[Any], namespace: str
) -> None:
    """A prune batch finds its rows by claim time, oldest first, through the index on
    (namespace, claimed_at), and deletes them by primary key: no scan of the history."""
    params = {"namespace": namespace, "before": T0 + timedelta(days=1), "batch": 5000}
    nodes = dispatch_scans(long_history, Q["prune_dispatches"], params, analyze=False)
    scans = [node for node in nodes if node["Node Type"] != "ModifyTable"]
    assert {scan["Node Type"] for scan in scans} <= {"Index Scan", "Index Only Scan"}, scans
    assert "safebeat_dispatch_claimed_at" in {scan.get("Index Name") for scan in scans}


@pytest.mark.parametrize("query", ["load_states", "all_states"])
def test_sqlite_state_reads_probe_the_newest_dispatched_row(sqlite_url: str, query: str) -> None:
    """On SQLite the newest dispatched window comes from the index of dispatched rows, by
    entry, and no read of the states scans the dispatch table."""
    SqliteStore(sqlite_url).migrate()
    with sqlite3.connect(path_of(sqlite_url)) as conn:
        params = {"namespace": "n", "names": json.dumps(ENTRIES), "now": 0}
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {SQLITE_Q[query]}", params)]
    # The newest dispatched row's id from the index, then the row by its id.
    assert "SEARCH d USING INDEX safebeat_dispatch_dispatched (namespace=? AND entry=?)" in plan
    assert "SEARCH q USING INTEGER PRIMARY KEY (rowid=?) LEFT-JOIN" in plan
    assert not [step for step in plan if step.startswith("SCAN") and "json_each" not in step]


@pytest.mark.django
def test_django_sqlite_state_reads_probe_the_newest_dispatched_row(
    django_aliases: dict[str, str], namespace: str
) -> None:
    """The Django store's ORM reads the newest dispatched window on SQLite through the
    index of dispatched rows too: the query Django sends is planned with it."""
    from django.db import connections

    from safebeat.stores.django import DjangoStore

    alias = django_aliases["sqlite"]
    store = DjangoStore(f"django://{alias}")
    registered(store, namespace, [Definition("a", "every 1m", "d")], REPLICA)
    sent: list[tuple[str, Any]] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append((sql, params))
        return execute(sql, params, many, context)

    connection = connections[alias]
    with connection.execute_wrapper(capture):
        store.states(namespace)
    [(sql, params)] = [(s, p) for s, p in sent if "safebeat_dispatch" in s]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        plan = [row[3] for row in cursor.fetchall()]
    assert [step for step in plan if "USING INDEX safebeat_dispatch_dispatched" in step], plan
