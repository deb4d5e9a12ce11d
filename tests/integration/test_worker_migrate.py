"""The worker hook's first use of the store never waits behind a migrator.

A migrator frozen (or slow) while it holds PostgreSQL's migration lock must not hold up
the tasks of a worker whose schema is already current: the worker reads the schema
version and takes no lock.
"""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from safebeat.config import Config
from safebeat.stores import per_process as local_store
from safebeat.stores.postgres import _MIGRATION_LOCK, PostgresStore

pytestmark = pytest.mark.postgres


def test_a_current_schema_is_used_while_another_session_holds_the_migration_lock(
    pg_url: str, namespace: str
) -> None:
    """With another session holding the migration lock in an open transaction, a worker's
    store for a current schema opens without waiting for that lock or failing."""
    PostgresStore(pg_url).migrate()
    config = Config(url=pg_url, namespace=namespace, lock_timeout=timedelta(seconds=1))
    with psycopg.connect(pg_url) as migrator, migrator.transaction():
        migrator.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        store = local_store.store_for(config)  # raised "lock timeout" before
        assert store.schema_version() == store.expected_schema_version
    store.close()
    local_store._local.stores.pop(pg_url, None)
