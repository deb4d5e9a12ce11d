"""The dispatcher, as the operator tools use it: trigger and backfill publish like beat does."""

from __future__ import annotations

import uuid
from datetime import timezone

from celery import Celery

from safebeat.config import Config
from safebeat.entries import Entry, compile_entry
from safebeat.identity import current_replica
from safebeat.ops import operations
from safebeat.records import Status
from safebeat.stores.memory import MemoryStore

NAMESPACE = "ops"


def make_app(broker: str) -> Celery:
    app = Celery("ops", broker=broker, set_as_current=False)
    app.conf.update(
        safebeat_url="memory://dispatch-unit-tests",
        safebeat_namespace=NAMESPACE,
        task_default_queue=f"q-{uuid.uuid4().hex[:8]}",
        broker_connection_timeout=0.5,
    )
    return app


def registered_store(app: Celery) -> tuple[MemoryStore, Entry]:
    """A memory store with the entry `report` registered, and that entry."""
    entry = compile_entry(
        "report",
        {"task": "t.run", "schedule": 3600.0},
        app_timezone=timezone.utc,
        config=Config(namespace=NAMESPACE),
    )
    store = MemoryStore()
    store.register(NAMESPACE, [entry.definition], current_replica())
    return store, entry


def test_trigger_publishes_and_records_the_window_sent() -> None:
    """A triggered window is published once and its row is marked sent."""
    app = make_app("memory://")
    store, entry = registered_store(app)
    published = operations.trigger(app, store, NAMESPACE, entry, actor="tests")
    assert [c.entry for c in published.sent] == ["report"]
    assert (published.unsent, published.failed) == ([], {})
    [row] = store.history(NAMESPACE, "report")
    assert (row.status, row.reason) == (Status.SENT, "trigger")


def test_trigger_with_the_broker_down_leaves_the_claim_for_beat() -> None:
    """With the broker refusing connections the claim stays claimed (beat re-publishes it
    with the same id) and is reported unsent, not failed."""
    app = make_app("amqp://guest:guest@127.0.0.1:1//")
    store, entry = registered_store(app)
    published = operations.trigger(app, store, NAMESPACE, entry, actor="tests")
    assert published.sent == []
    assert published.failed == {}
    assert [c.entry for c in published.unsent] == ["report"]
    [row] = store.history(NAMESPACE, "report")
    assert row.status is Status.CLAIMED
