"""A row the server refuses costs its own entry: beat puts that entry aside as broken and
registers and ticks the others (real PostgreSQL, refusing one entry's row by a constraint
the test adds, as a server refuses a value it cannot hold)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from celery import Celery

from safebeat import Scheduler
from safebeat.stores.postgres import PostgresStore

pytestmark = pytest.mark.postgres


@pytest.fixture
def refused(pg_url: str) -> Iterator[str]:
    """An entry name the server refuses to store, by a CHECK constraint on the entry table."""
    name = f"refused-{uuid.uuid4().hex[:8]}"
    constraint = f"safebeat_test_{name.replace('-', '_')}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            f"ALTER TABLE safebeat_entry ADD CONSTRAINT {constraint} "
            f"CHECK (name <> '{name}') NOT VALID"
        )
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE safebeat_entry DROP CONSTRAINT {constraint}")


def test_an_entry_the_store_refuses_to_register_is_put_aside_and_the_others_run(
    pg_url: str, namespace: str, refused: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, one refused row failed `register` for every entry, and beat retried with
    backoff, dispatching nothing; now the refused entry is broken, said once, and the
    ordinary entries register and dispatch."""
    app = Celery("refused", broker="memory://", set_as_current=False)
    app.conf.update(
        result_expires=None,
        task_default_queue=namespace,
        safebeat_namespace=namespace,
        beat_schedule={
            name: {"task": "t.run", "schedule": 0.5} for name in ("a", refused, "b", "c", "d")
        },
    )
    store = PostgresStore(pg_url)
    scheduler = Scheduler(app, store=store)
    with caplog.at_level(logging.ERROR, "safebeat"):
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            scheduler.tick()
            time.sleep(0.1)
    try:
        assert set(store.states(namespace)) == {"a", "b", "c", "d"}
        assert refused in scheduler.broken_entries
        sent = {r.entry for r in store.history(namespace, limit=1000) if r.sent_at is not None}
        assert sent == {"a", "b", "c", "d"}
        said = [r.getMessage() for r in caplog.records if refused in r.getMessage()]
        assert len(said) == 1
        assert "refuses to register it" in said[0]
    finally:
        scheduler.close()
