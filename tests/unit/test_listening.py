"""Every HTTP server of safebeat (beat's probes and metrics, the worker's metrics, the
exporter) listens on IPv6 and IPv4 by default, so a pod of an IPv6-only or dual-stack
cluster is probed and scraped on its own address."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from safebeat import listening
from safebeat.beat.metrics import BeatMetrics
from safebeat.ops.exporter import ScheduleHealthCollector, serve
from safebeat.ops.schedule_health import NamespaceHealth
from safebeat.worker.metrics import WorkerMetrics
from tests import services

pytestmark = pytest.mark.skipif(
    listening.any_address() != "::", reason="this host cannot open an IPv6 socket"
)


def answers(port: int, host: str) -> int:
    """The status of GET http://host:port/metrics, retried while the server starts."""
    deadline = time.monotonic() + 10
    while True:
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as response:
                return int(response.status)
        except urllib.error.URLError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def beat_metrics(port: int) -> Callable[[], None]:
    BeatMetrics("billing", "host:1:aaaa", "sqlite:///x").serve(port)
    return lambda: None


def worker_metrics(port: int) -> Callable[[], None]:
    WorkerMetrics().serve(port, pool="solo")
    return lambda: None


def exporter(port: int) -> Callable[[], None]:
    def read() -> NamespaceHealth:
        raise OSError("no store here")

    stop = threading.Event()
    collector = ScheduleHealthCollector("billing", read, time.monotonic)
    thread = threading.Thread(
        target=serve,
        kwargs={
            "collector": collector,
            "port": port,
            "address": None,
            "interval": 60.0,
            "stop": stop,
        },
        daemon=True,
    )
    thread.start()
    return stop.set


@pytest.mark.parametrize(
    "server", [beat_metrics, worker_metrics, exporter], ids=lambda f: f.__name__
)
def test_metrics_servers_answer_on_ipv6_and_ipv4_by_default(
    server: Callable[[int], Callable[[], None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beat's and the worker's metrics and the exporter, with no address given, answer on
    ::1 and on 127.0.0.1 alike."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    port = services.free_port()
    stop = server(port)
    try:
        assert answers(port, "[::1]") == 200
        assert answers(port, "127.0.0.1") == 200
    finally:
        stop()


def test_an_ipv4_address_given_is_kept() -> None:
    """An explicit address is used as given: 127.0.0.1 is not reached over IPv6."""
    port = services.free_port()
    listening.serve_registry(BeatMetrics("b", "h:1:a", "sqlite:///x").registry, port, "127.0.0.1")
    assert answers(port, "127.0.0.1") == 200
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://[::1]:{port}/metrics", timeout=2)


def test_shown_brackets_an_ipv6_address() -> None:
    """Log lines write an IPv6 address as a URL does."""
    assert listening.shown("::", 9809) == "[::]:9809"
    assert listening.shown("0.0.0.0", 9809) == "0.0.0.0:9809"  # noqa: S104
