"""A row the server refuses costs its own entry: beat puts that entry aside and registers and
ticks the others (real PostgreSQL, refusing one entry's rows by a constraint the test adds,
as a server refuses a value it cannot hold), at registration and at claims."""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import psycopg
import pytest
from celery import Celery

from safebeat import Scheduler
from safebeat.stores.postgres import PostgresStore

pytestmark = pytest.mark.postgres
HALF = timedelta(seconds=0.5)


@contextmanager
def refusing(pg_url: str, table: str, column: str) -> Iterator[str]:
    """A name the server refuses in `table`'s `column`, by a CHECK constraint (dropped after)."""
    name = f"refused-{uuid.uuid4().hex[:8]}"
    constraint = f"safebeat_test_{name.replace('-', '_')}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT {constraint} "
            f"CHECK ({column} <> '{name}') NOT VALID"
        )
    try:
        yield name
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT {constraint}")


@pytest.fixture
def refused(pg_url: str) -> Iterator[str]:
    """An entry name the server refuses to register."""
    with refusing(pg_url, "safebeat_entry", "name") as name:
        yield name


@pytest.fixture
def refused_claims(pg_url: str) -> Iterator[str]:
    """An entry name whose windows' rows the server refuses (it registers)."""
    with refusing(pg_url, "safebeat_dispatch", "entry") as name:
        yield name


def beat(namespace: str, names: tuple[str, ...], store: PostgresStore) -> Scheduler:
    """A real beat on `store` with entries `names`, each every half second."""
    app = Celery("refused", broker="memory://", set_as_current=False)
    app.conf.update(
        result_expires=None,
        task_default_queue=namespace,
        safebeat_namespace=namespace,
        beat_schedule={name: {"task": "t.run", "schedule": 0.5} for name in names},
    )
    return Scheduler(app, store=store)


def served_as_broken(scheduler: Scheduler) -> set[str]:
    """The entries beat's safebeat_entry_broken names (metrics served from the start)."""
    return {
        sample.labels["entry"]
        for family in scheduler.engine.metrics.registry.collect()
        if family.name == "safebeat_entry_broken"
        for sample in family.samples
        if sample.value == 1
    }


def tick_for(scheduler: Scheduler, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        scheduler.tick()
        time.sleep(0.1)


def test_an_entry_the_store_refuses_to_register_is_put_aside_and_the_others_run(
    pg_url: str, namespace: str, refused: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, one refused row failed `register` for every entry, and beat retried with
    backoff, dispatching nothing; now the refused entry is broken, said once, and the
    ordinary entries register and dispatch."""
    store = PostgresStore(pg_url)
    scheduler = beat(namespace, ("a", refused, "b", "c", "d"), store)
    scheduler.engine.metrics.serve(0, address="127.0.0.1")
    with caplog.at_level(logging.ERROR, "safebeat"):
        tick_for(scheduler, 4)
    try:
        assert set(store.states(namespace)) == {"a", "b", "c", "d"}
        assert refused in scheduler.broken_entries
        assert served_as_broken(scheduler) == {refused}
        sent = {r.entry for r in store.history(namespace, limit=1000) if r.sent_at is not None}
        assert sent == {"a", "b", "c", "d"}
        said = [r.getMessage() for r in caplog.records if refused in r.getMessage()]
        assert len(said) == 1
        assert "refuses to register it" in said[0]
    finally:
        scheduler.close()


def test_an_entry_whose_claims_the_store_refuses_is_put_aside_and_the_others_run(
    pg_url: str, namespace: str, refused_claims: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, one refused claim row failed every tick of the namespace (one statement
    inserts a round's rows), and beat backed off, dispatching nothing; now the round is
    ticked by halves, the refused entry is put aside (said once, tried again later) and
    every other entry's windows are claimed and sent, none lost to the splitting."""
    store = PostgresStore(pg_url)
    scheduler = beat(namespace, ("a", "b", refused_claims, "c", "d"), store)
    scheduler.engine.metrics.serve(0, address="127.0.0.1")
    with caplog.at_level(logging.ERROR, "safebeat"):
        tick_for(scheduler, 6)
    try:
        assert served_as_broken(scheduler) == {refused_claims}  # the alert's gauge, kept
        rows = store.history(namespace, limit=1000)
        assert {r.entry for r in rows if r.sent_at is not None} == {"a", "b", "c", "d"}
        assert [r for r in rows if r.entry == refused_claims] == []
        for name in ("a", "b", "c", "d"):
            windows = sorted(r.window for r in rows if r.entry == name)
            assert len(windows) >= 8
            assert all(later - earlier == HALF for earlier, later in itertools.pairwise(windows))
        said = [r.getMessage() for r in caplog.records if refused_claims in r.getMessage()]
        assert len(said) == 1
        assert "refuses its windows' rows" in said[0]
    finally:
        scheduler.close()


def test_an_entry_added_at_run_time_that_the_store_refuses_is_put_aside_alone(
    pg_url: str, namespace: str, refused: str
) -> None:
    """An entry added while beat runs whose row the server refuses is registered alone,
    put aside as broken, and the running entries go on being sent; nothing else is
    registered again."""
    import safebeat.schedules

    store = PostgresStore(pg_url)
    scheduler = beat(namespace, ("a", "b"), store)
    try:
        tick_for(scheduler, 1.5)
        registered: list[str] = []
        register = store.register

        def counted(namespace: str, definitions: object, replica: object) -> object:
            registered.extend(d.name for d in definitions)  # type: ignore[attr-defined]
            return register(namespace, definitions, replica)  # type: ignore[arg-type]

        store.register = counted  # type: ignore[assignment,method-assign]
        safebeat.schedules.add(scheduler.app, refused, "t.run", 1, store=store)
        tick_for(scheduler, 2.5)
        assert refused in scheduler.broken_entries
        assert set(registered) == {refused}
        assert scheduler.engine.ready
        before = len(store.history(namespace, limit=1000))
        tick_for(scheduler, 1.5)
        later = store.history(namespace, limit=1000)
        assert len(later) > before
        assert refused not in {r.entry for r in later}
    finally:
        scheduler.close()
