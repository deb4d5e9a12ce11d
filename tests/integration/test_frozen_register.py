"""A replica frozen inside `register` holds up the others' ticks at most the lock timeout.

`register` runs at every start, every django-celery-beat change and whenever entries go
missing, and it writes the rows of changed entries, which a tick then waits for. Here the
frozen replica is real: its `register` stops (on an event, as a SIGSTOP or a long pause
would) right after writing a changed entry and before committing, on PostgreSQL and on
the `django://` store over PostgreSQL and MariaDB; the other replica keeps ticking.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from safebeat.identity import Replica, task_id_for
from safebeat.records import Definition, NewClaim, TickPlan
from safebeat.stores.postgres import tick as tick_statements
from safebeat.stores.protocols import Store
from tests.registering import ROW_LOCKING_STORES, opened_stores, registered

LOCK_TIMEOUT = timedelta(seconds=1)
LIVE = Replica("host-live", 1, "live01")
FROZEN = Replica("host-frozen", 2, "frozen")


@pytest.fixture(params=ROW_LOCKING_STORES)
def open_store(request: pytest.FixtureRequest) -> Iterator[Callable[[], Store]]:
    """Store instances on one backing store, bounded by a one-second lock timeout."""
    yield from opened_stores(request, lock_timeout=LOCK_TIMEOUT)


def freeze_after_writing(store: Store, inside: threading.Event, thaw: threading.Event) -> None:
    """Make `store`'s register stop, in this thread only, after its writes and before its
    commit: after its (only) slice, the last step of every backend's."""

    def frozen(load: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            written = load(*args, **kwargs)
            if threading.current_thread().name == "frozen-register":
                inside.set()
                thaw.wait(30)
            return written

        return step

    if hasattr(store, "_register_slice"):  # the Django ORM store
        store._register_slice = frozen(store._register_slice)  # type: ignore[attr-defined]
    else:
        tick_statements._register_slice = frozen(tick_statements._register_slice)  # type: ignore[attr-defined]


def test_a_replica_frozen_inside_register_holds_up_others_at_most_the_lock_timeout(
    open_store: Callable[[], Store], namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a replica stays frozen inside register after changing an entry, the other
    replica's tick of that entry commits its claim within the lock timeout (plus the
    time to notice), instead of waiting for the frozen one."""
    live = open_store()
    state = registered(live, namespace, [Definition("a", "every 1s", "d1")], LIVE)["a"]
    monkeypatch.setattr(tick_statements, "_register_slice", tick_statements._register_slice)
    inside, thaw = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def frozen_replica() -> None:
        store = open_store()
        freeze_after_writing(store, inside, thaw)
        try:
            store.register(namespace, [Definition("a", "every 1s", "d2")], FROZEN)
        except Exception as exc:  # noqa: BLE001 - ending its session is the point
            errors.append(exc)

    thread = threading.Thread(target=frozen_replica, name="frozen-register")
    thread.start()
    try:
        assert inside.wait(30)
        frozen_at = time.monotonic()
        window = state.anchor + timedelta(seconds=1)
        plan = TickPlan(
            claims=[NewClaim("a", window, task_id_for(namespace, "a", window), "t.run")],
            advances={"a": window},
        )
        claimed = None
        while claimed is None and time.monotonic() - frozen_at < 20:
            try:
                result = live.tick(namespace, ["a"], lambda now, s: plan, replica=LIVE)
            except Exception:  # noqa: BLE001, S112 - a tick that waited a lock timeout fails
                continue
            if result is not None and result.claimed:
                claimed = time.monotonic() - frozen_at
        assert claimed is not None, "the live replica never claimed while one was frozen"
        assert claimed < LOCK_TIMEOUT.total_seconds() + 3
    finally:
        thaw.set()
        thread.join(30)
    assert [row.window for row in live.history(namespace, "a")] == [window]
