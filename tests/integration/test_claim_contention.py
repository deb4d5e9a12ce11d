"""`safebeat.claim()` contended at once by several processes (threads for memory): one winner."""

from __future__ import annotations

import multiprocessing
import threading
import uuid
from multiprocessing.synchronize import Event

import pytest
from celery import Celery

import safebeat

KEYS = [("weekly-report", client, "2026-03-02") for client in range(40)]


def app_for(url: str, namespace: str) -> Celery:
    app = Celery("contention", set_as_current=False)
    app.conf.update(safebeat_url=url, safebeat_namespace=namespace)
    return app


def contend(url: str, namespace: str, go: Event, results: multiprocessing.Queue[object]) -> None:
    """Claim every key as soon as `go` is set; report the ones this process won."""
    app = app_for(url, namespace)
    safebeat.claim(("warm-up", uuid.uuid4().hex), app=app)  # connect before the race starts
    go.wait(30)
    results.put([key for key in KEYS if safebeat.claim(key, app=app)])


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_processes_racing_for_keys_have_one_winner_each(
    request: pytest.FixtureRequest, backend: str, tmp_path: object, namespace: str
) -> None:
    """Six processes claim the same 40 keys at once: each key is won by exactly one of them."""
    url = (
        request.getfixturevalue("pg_url") if backend == "postgres" else f"sqlite:///{tmp_path}/s.db"
    )
    context = multiprocessing.get_context("fork")
    go, results = context.Event(), context.Queue()
    processes = [
        context.Process(target=contend, args=(url, namespace, go, results)) for _ in range(6)
    ]
    for process in processes:
        process.start()
    go.set()
    won = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(30)
        assert process.exitcode == 0
    winners = [tuple(key) for keys in won for key in keys]  # type: ignore[attr-defined]
    assert sorted(winners) == sorted(KEYS)


def test_threads_racing_on_the_memory_store_have_one_winner_each(namespace: str) -> None:
    """The memory store (one process) gives each key to exactly one of six racing threads."""
    app = app_for(f"memory://contention-{uuid.uuid4().hex}", namespace)
    barrier, won = threading.Barrier(6), []

    def race() -> None:
        barrier.wait(10)
        won.extend(key for key in KEYS if safebeat.claim(key, app=app))

    threads = [threading.Thread(target=race) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(won) == sorted(KEYS)
