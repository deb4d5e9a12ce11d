"""examples/healthchecks: pings a local HTTP server from a real (embedded) worker, through
safebeat's hooks, for windows published by safebeat."""

from __future__ import annotations

import http.server
import logging
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker

import safebeat.worker
from safebeat import signals
from safebeat.beat.publishing import Publisher
from safebeat.config import Config
from safebeat.entries import compile_entry
from safebeat.identity import Replica, task_id_for
from safebeat.records import Claim
from safebeat.stores.per_process import store_of
from safebeat.stores.protocols import NewClaim, TickPlan

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "healthchecks"


@pytest.fixture
def pings() -> Iterator[tuple[str, list[str]]]:
    """A Healthchecks stand-in on loopback: its base URL, and the paths it was pinged at."""
    paths: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            paths.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/ping-key", paths
    server.shutdown()
    server.server_close()


@pytest.fixture
def healthchecks(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The example module, imported from examples/ as a user's app would; uninstalled after."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    import healthchecks_ping

    yield healthchecks_ping
    healthchecks_ping.uninstall()
    sys.modules.pop("healthchecks_ping", None)


def claim_window(app: Celery, entry: str, task: str) -> tuple[Any, Claim]:
    """Claim the current second's window of `entry` in the app's store, as beat would."""
    store = store_of(app)[1]
    window = store.clock().replace(microsecond=0)
    plan = TickPlan(claims=[NewClaim(entry, window, task_id_for("unit", entry, window), task)])
    result = store.tick("unit", [], lambda n, s: plan, replica=Replica("h", 1, "r00000"))
    assert result is not None
    [claim] = result.claimed
    raw: dict[str, Any] = {"task": task, "schedule": 60.0}
    return compile_entry(entry, raw, app_timezone=timezone.utc, config=Config()), claim


def wait_for(condition: Any, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_each_run_pings_its_start_and_outcome_and_a_duplicate_pings_nothing(
    pings: tuple[str, list[str]], healthchecks: ModuleType
) -> None:
    """A succeeding and a failing window each ping start, then success or fail, with the
    task id as the run id, and send execution_started and execution_finished; a duplicate
    delivery of the first window pings and sends neither."""
    base, paths = pings
    healthchecks.install(base)
    app = Celery("hc", broker="memory://", backend="cache+memory://", set_as_current=False)
    app.conf.update(
        safebeat_url=f"memory://hc-{uuid.uuid4().hex}",
        safebeat_namespace="unit",
        task_default_queue=f"q-{uuid.uuid4().hex[:8]}",
    )

    @app.task(name="hc.report", shared=False)
    def report() -> None: ...

    @app.task(name="hc.broken", shared=False)
    def broken() -> None:
        raise RuntimeError("report failed")

    safebeat.worker.install(app)
    good, good_claim = claim_window(app, "Weekly report", "hc.report")
    bad, bad_claim = claim_window(app, "broken", "hc.broken")
    duplicates: list[str] = []
    ran: list[tuple[str, str, str | None]] = []

    def skipped(sender: Any = None, task_id: str = "", **_: Any) -> None:
        duplicates.append(task_id)

    def run(signal: Any = None, task_id: str = "", outcome: str | None = None, **_: Any) -> None:
        ran.append((signal.name.split("_")[-1], task_id, outcome))

    signals.execution_duplicate.connect(skipped, weak=False)
    signals.execution_started.connect(run, weak=False)
    signals.execution_finished.connect(run, weak=False)
    try:
        with start_worker(app, pool="solo", perform_ping_check=False):
            with app.producer_or_acquire() as producer:
                Publisher(app).send(producer, good, good_claim)
                Publisher(app).send(producer, bad, bad_claim)
            wait_for(lambda: len(paths) == 4)
            with app.producer_or_acquire() as producer:
                Publisher(app).send(producer, good, good_claim)  # a second delivery
            wait_for(lambda: duplicates == [good_claim.task_id])
    finally:
        signals.execution_duplicate.disconnect(skipped)
        signals.execution_started.disconnect(run)
        signals.execution_finished.disconnect(run)
    good_id, bad_id = good_claim.task_id, bad_claim.task_id
    # The same worker, the same runs: execution_started and execution_finished, none for
    # the duplicate.
    assert [(kind, outcome) for kind, task_id, outcome in ran if task_id == good_id] == [
        ("started", None),
        ("finished", "success"),
    ]
    assert [(kind, outcome) for kind, task_id, outcome in ran if task_id == bad_id] == [
        ("started", None),
        ("finished", "failure"),
    ]
    assert len(ran) == 4
    assert sorted(paths) == sorted(
        [
            f"/ping-key/weekly-report/start?rid={good_id}",
            f"/ping-key/weekly-report?rid={good_id}",
            f"/ping-key/broken/start?rid={bad_id}",
            f"/ping-key/broken/fail?rid={bad_id}",
        ]
    )
    assert paths.index(f"/ping-key/broken/start?rid={bad_id}") < paths.index(
        f"/ping-key/broken/fail?rid={bad_id}"
    )


def test_a_server_that_is_down_costs_a_warning_not_the_task(
    healthchecks: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    """A ping to a port nothing listens on is logged; the hook returns normally."""
    pinger = healthchecks.Pinger(f"http://127.0.0.1:{free_port()}/k", timeout=1.0)
    with caplog.at_level(logging.WARNING, "healthchecks_ping"):
        pinger.ping("weekly", "/start", "id-1")
    assert pinger.sent == []
    assert "ping http://127.0.0.1" in caplog.text


def test_the_slug_is_the_entry_name_made_url_safe(healthchecks: ModuleType) -> None:
    """Names become lowercase slugs with one dash for each run of other characters."""
    assert healthchecks.default_slug("Weekly report (EU)") == "weekly-report-eu"
    with pytest.raises(ValueError, match="http"):
        healthchecks.install("hc-ping.com/key")


def free_port() -> int:
    """A loopback port that was just free: nothing listens on it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
