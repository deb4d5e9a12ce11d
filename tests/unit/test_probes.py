"""Beat's /livez and /readyz: the rules on a controlled clock, then a scheduler ticking on a
store that goes down and comes back, then the HTTP server answering them."""

from __future__ import annotations

import contextlib
import logging
import socket
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery

from safebeat import listening
from safebeat.beat.probe_server import ProbeServer, serve_probes
from safebeat.beat.probes import ProbeState, default_liveness_timeout
from safebeat.config import load_config
from safebeat.errors import ConfigError, StoreUnavailable
from safebeat.stores.memory import MemoryStore
from safebeat.testing import FakeClock, memory_scheduler
from tests import services

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def state(clock: FakeClock, liveness_timeout: float = 90.0) -> ProbeState:
    return ProbeState(monotonic=clock.monotonic, liveness_timeout=liveness_timeout)


# --- the rules -------------------------------------------------------------------------------


def test_not_live_before_the_first_tick_then_live_until_the_loop_stalls(clock: FakeClock) -> None:
    """/livez fails until a tick ran, passes for liveness_timeout after each, fails after."""
    probes = state(clock, liveness_timeout=90)
    assert not probes.liveness().ok
    assert "no tick yet" in probes.liveness().reason
    probes.loop_ran()
    clock.advance(90)
    assert probes.liveness().ok
    clock.advance(1)
    answer = probes.liveness()
    assert not answer.ok
    assert "last tick 91s ago" in answer.reason


def test_a_failing_store_never_makes_beat_unlive(clock: FakeClock) -> None:
    """While every store call fails and the loop keeps ticking, beat is live and not ready."""
    probes = state(clock)
    probes.loop_ran()
    probes.heartbeat_recorded()
    for _ in range(600):  # ten minutes of failures, one tick a second
        probes.store_failed()
        probes.loop_ran()
        clock.advance(1)
    assert probes.liveness().ok
    ready = probes.readiness()
    assert not ready.ok
    assert ready.reason == "store failing for 600s"


def test_ready_once_the_store_answers_and_a_heartbeat_is_recorded(clock: FakeClock) -> None:
    """Readiness needs a heartbeat within 30 s and no store failure since the last success."""
    probes = state(clock)
    probes.loop_ran()
    assert probes.readiness().reason == "no heartbeat recorded yet"
    probes.heartbeat_recorded()
    assert probes.readiness().ok
    probes.store_failed()
    assert not probes.readiness().ok
    probes.store_answered()
    assert probes.readiness().ok
    clock.advance(25)
    probes.loop_ran()
    clock.advance(6)
    answer = probes.readiness()
    assert not answer.ok
    assert "last heartbeat 31s ago" in answer.reason


def test_a_stalled_loop_is_neither_live_nor_ready(clock: FakeClock) -> None:
    """Readiness includes liveness: a loop stuck past the timeout answers 503 on both."""
    probes = state(clock, liveness_timeout=20)
    probes.loop_ran()
    probes.heartbeat_recorded()
    clock.advance(21)
    assert not probes.readiness().ok
    assert "stalled" in probes.readiness().reason


def test_default_liveness_timeout_follows_the_max_interval_and_the_entries() -> None:
    """90 s at beat's 5 s max interval; a longer --max-interval, or more entries to register
    again in one tick, get a longer timeout."""
    assert default_liveness_timeout(5.0) == 90
    assert default_liveness_timeout(300.0) == 60 + 6 * 300
    assert default_liveness_timeout(5.0, 100_000) == 115
    assert default_liveness_timeout(5.0, 1_000_000) == 340


# --- a scheduler ------------------------------------------------------------------------------


class FlakyStore(MemoryStore):
    """A memory store whose every call fails while `down` is set."""

    down = False

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if not name.startswith("_") and callable(attr) and object.__getattribute__(self, "down"):

            def fail(*args: Any, **kwargs: Any) -> Any:
                raise StoreUnavailable("connection refused")

            return fail
        return attr


def make_app(**conf: Any) -> Celery:
    app = Celery("probes", broker="memory://", set_as_current=False)
    app.conf.update(
        task_default_queue=f"q-{uuid.uuid4().hex[:8]}",
        beat_schedule={"a": {"task": "t.run", "schedule": 1.0}},
        safebeat_url="memory://unit-tests-unused",
        **conf,
    )
    return app


def test_a_scheduler_stays_live_through_a_store_outage_and_is_ready_after(
    clock: FakeClock,
) -> None:
    """Ticking on a store that is down: live, not ready; once it is back, ready again."""
    store = FlakyStore(clock=clock.now)
    store.down = True
    scheduler = memory_scheduler(make_app(), clock, store)
    for _ in range(300):  # five minutes of outage
        scheduler.tick()
        clock.advance(1)
    assert scheduler.probes.liveness().ok
    assert not scheduler.probes.readiness().ok
    store.down = False
    for _ in range(40):  # the backoff's longest wait is 36 s
        scheduler.tick()
        clock.advance(1)
        if scheduler.probes.readiness().ok:
            break
    assert scheduler.probes.readiness().ok, scheduler.probes.readiness()


def test_a_scheduler_whose_loop_stops_ticking_is_not_live(clock: FakeClock) -> None:
    """With no tick for longer than the liveness timeout, the scheduler answers not live."""
    scheduler = memory_scheduler(make_app(safebeat_liveness_timeout="40s"), clock)
    scheduler.tick()
    assert scheduler.probes.readiness().ok
    clock.advance(41)
    assert not scheduler.probes.liveness().ok


def test_the_scheduler_derives_the_timeout_from_its_max_interval(clock: FakeClock) -> None:
    """Without safebeat_liveness_timeout, beat's `--max-interval` and its entries set the
    liveness timeout."""
    scheduler = memory_scheduler(make_app(beat_max_loop_interval=60), clock)
    expected = default_liveness_timeout(60, len(scheduler.entries))
    assert scheduler.probes.liveness_timeout == expected
    configured = memory_scheduler(make_app(safebeat_liveness_timeout="40s"), clock)
    assert configured.probes.liveness_timeout == 40


# --- settings ---------------------------------------------------------------------------------


def test_probe_settings_are_read_and_checked() -> None:
    """The probe port and the liveness timeout are settings; the port can't be the metrics'."""
    config = load_config({"safebeat_probe_port": "9809", "safebeat_liveness_timeout": "2m"})
    assert config.probe_port == 9809
    assert config.liveness_timeout == timedelta(minutes=2)
    defaults = load_config({})
    assert defaults.probe_port is None
    assert defaults.liveness_timeout is None
    with pytest.raises(ConfigError, match="safebeat_liveness_timeout"):
        load_config({"safebeat_liveness_timeout": "0s"})
    with pytest.raises(ConfigError, match="SAFEBEAT_PROBE_PORT=9100 is also safebeat_metrics_port"):
        load_config({"safebeat_metrics_port": 9100}, environ={"SAFEBEAT_PROBE_PORT": "9100"})


# --- the server -------------------------------------------------------------------------------


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_server_answers_200_or_503_with_the_reason(clock: FakeClock) -> None:
    """GET /livez and /readyz answer the state's verdicts; any other path is a 404."""
    probes = state(clock)
    server = ProbeServer(probes, 0, "127.0.0.1")
    try:
        assert get(server.port, "/livez") == (503, "starting: no tick yet\n")
        probes.loop_ran()
        probes.store_failed()
        assert get(server.port, "/livez") == (200, "ok: last tick 0.0s ago\n")
        assert get(server.port, "/readyz") == (503, "store failing for 0s\n")
        probes.store_answered()
        probes.heartbeat_recorded()
        assert get(server.port, "/readyz?verbose") == (200, "ok: heartbeat 0.0s ago\n")
        assert get(server.port, "/metrics")[0] == 404
    finally:
        server.close()


def test_a_taken_port_costs_the_probes_not_beat(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """serve_probes on a port in use returns None instead of raising, and says at ERROR
    which port, which setting to change and what follows."""
    first = ProbeServer(state(clock), 0)
    try:
        with caplog.at_level(logging.ERROR, "safebeat"):
            assert serve_probes(state(clock), first.port) is None
    finally:
        first.close()
    [said] = [r for r in caplog.records if r.levelno == logging.ERROR]
    text = said.getMessage()
    assert f"port {first.port}" in text
    assert "safebeat_probe_port (SAFEBEAT_PROBE_PORT; the Helm chart's probes.port)" in text
    assert "Kubernetes will restart it" in text


def test_a_beat_whose_probe_port_is_taken_says_so_and_dispatches(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A scheduler whose probe port another process holds starts, ticks and dispatches,
    and its log names the port and the setting."""
    with socket.create_server(("127.0.0.1", 0)) as taken, socket.socket(socket.AF_INET6) as v6:
        port = taken.getsockname()[1]
        with contextlib.suppress(OSError):  # hold the IPv6 wildcard too, where there is one
            v6.bind(("::", port))
            v6.listen()
        with caplog.at_level(logging.ERROR, "safebeat"):
            scheduler = memory_scheduler(make_app(safebeat_probe_port=port), clock)
            scheduler.tick()
        try:
            assert scheduler.engine.probes.liveness().ok
        finally:
            scheduler.close()
    assert any(
        f"port {port}" in r.getMessage() and "safebeat_probe_port" in r.getMessage()
        for r in caplog.records
    )


def test_probes_answer_on_ipv6_and_ipv4_by_default(clock: FakeClock) -> None:
    """With no address given the server listens on every address, IPv6 and IPv4, so a
    kubelet probing an IPv6-only or dual-stack pod's address reaches it."""
    if listening.any_address() != "::":
        pytest.skip("this host has no IPv6")
    probes = state(clock)
    probes.loop_ran()
    server = ProbeServer(probes, 0)
    try:
        for host in ("127.0.0.1", "[::1]"):
            with urllib.request.urlopen(f"http://{host}:{server.port}/livez", timeout=5) as r:
                assert r.status == 200, host
    finally:
        server.close()


def test_a_scheduler_serves_its_probes_on_the_probe_port(clock: FakeClock) -> None:
    """With safebeat_probe_port set, the scheduler serves its own state, and stops on close."""
    port = services.free_port()
    scheduler = memory_scheduler(make_app(safebeat_probe_port=port), clock)
    scheduler.tick()
    assert get(port, "/readyz")[0] == 200
    scheduler.close()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=2)
