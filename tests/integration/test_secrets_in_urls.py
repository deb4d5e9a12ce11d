"""A store password holding a character a URL must percent-encode (`#`, `?`, `/`, `@`, `%`)
never shows, whether its driver reads the URL as meant or not: not in the redacted URL,
the store's errors, `safebeat status` and `doctor`, the beat's log and banner, the
Prometheus label `safebeat_replica_info{store=...}`, nor the console's pages.

Every scheme is tried against real servers where one runs (PostgreSQL with trust auth reads
a `#` or `?` password as meant and connects; Redis refuses any password it was not given),
and against closed ports elsewhere, so both the shown URL and the driver's errors are read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest
from starlette.testclient import TestClient

import safebeat.web
from safebeat import Scheduler
from safebeat.cli import main
from safebeat.errors import SafebeatError
from safebeat.store_urls import redact, scrub
from safebeat.stores import open_store
from safebeat.testing import FakeClock
from tests import services
from tests.integration.beat import make_app

#: Two halves of every password: a driver that cuts the password at the odd character
#: still must show neither half.
HALVES = ("Qx7alpha", "Zr4bravo")
CHARACTERS = ("#", "?", "/", "@", "%")
CLOSED = services.free_port()
SCHEMES = (
    "postgresql",
    "redis",
    "rediss",
    "redis+sentinel",
    "redis+cluster",
    "sqlite",
    "django",
)


def password(character: str) -> str:
    return character.join(HALVES)


def store_url(scheme: str, secret: str, *, pg_url: str, tmp_path: Path) -> str:
    """A URL of `scheme` carrying `secret` unencoded, on a real server where one runs."""
    if scheme == "postgresql":
        parts = urlsplit(pg_url)
        return f"postgresql://postgres:{secret}@{parts.hostname}:{parts.port or 5432}{parts.path}"
    return {
        "redis": f"redis://:{secret}@127.0.0.1:6379/0",
        "rediss": f"rediss://beat:{secret}@127.0.0.1:{CLOSED}/0",
        "redis+sentinel": f"redis+sentinel://:{secret}@127.0.0.1:{CLOSED}/mymaster",
        "redis+cluster": f"redis+cluster://beat:{secret}@127.0.0.1:{CLOSED}",
        "sqlite": f"sqlite://beat:{secret}@/{tmp_path}/store.sqlite3",
        "django": f"django://beat:{secret}@default",
    }[scheme]


def leaked(text: str, secret: str) -> list[str]:
    """The parts of `secret` found in `text`: the whole, or either half."""
    return [part for part in (secret, *HALVES) if part in text]


@pytest.fixture(params=SCHEMES)
def scheme(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=CHARACTERS, ids=["hash", "question", "slash", "at", "percent"])
def secret(request: pytest.FixtureRequest) -> str:
    return password(request.param)


@pytest.fixture
def url(scheme: str, secret: str, pg_url: str, tmp_path: Path) -> str:
    return store_url(scheme, secret, pg_url=pg_url, tmp_path=tmp_path)


@pytest.fixture
def no_django_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a Django project: the console and CLI read no django-celery-beat rows."""
    monkeypatch.setattr("safebeat.entries.app_entries.periodic_tasks_reason", lambda app: None)


@pytest.mark.postgres
@pytest.mark.redis
def test_the_redacted_url_and_the_stores_errors_hide_it(url: str, secret: str) -> None:
    """`redact`, the store's display URL, and whatever error opening or reading the store
    raises show no part of the password; `scrub` removes it from a driver's message."""
    assert not leaked(redact(url), secret)
    assert not leaked(scrub(f"auth failed for {secret}", url), secret)
    shown = []
    try:
        store = open_store(url)
        shown.append(store.display_url)
        try:
            store.states("secrets")
        finally:
            store.close()
    except SafebeatError as exc:
        shown.append(str(exc))
    for text in shown:
        assert not leaked(text, secret)


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.usefixtures("no_django_rows")
def test_status_and_doctor_hide_it(
    url: str, secret: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`safebeat status` and `safebeat doctor`, their output and their log, hide it."""
    caplog.set_level(logging.DEBUG)
    for command in ("status", "doctor"):
        result = CliRunner().invoke(main, ["--url", url, "--namespace", namespace, command])
        assert not leaked(result.output, secret), command
    assert not leaked(caplog.text, secret)


@pytest.mark.postgres
@pytest.mark.redis
def test_the_beat_banner_log_and_metrics_label_hide_it(
    url: str, secret: str, namespace: str, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A beat on the URL: its banner line, the log of a tick, and the exposed metrics
    (`safebeat_replica_info{store=...}`) hide it."""
    caplog.set_level(logging.DEBUG)
    app = make_app(redis_url, f"secrets-{namespace}", url, namespace)
    try:
        scheduler = Scheduler(app, monotonic=FakeClock().monotonic)
    except SafebeatError as exc:  # the URL refused before any beat starts
        shown = [str(exc)]
    else:
        try:
            scheduler.tick()
            shown = [scheduler.info, generate_latest(scheduler.metrics.registry).decode()]
            assert "safebeat_replica_info{" in shown[1]
        finally:
            scheduler.close()
    for text in (*shown, caplog.text):
        assert not leaked(text, secret)


@pytest.fixture
def console(url: str, namespace: str) -> Iterator[Callable[[str], str]]:
    """GET a page of the console on the URL, as its text."""
    with TestClient(
        safebeat.web.app(url=url, namespace=namespace), base_url="http://127.0.0.1:8765"
    ) as client:
        yield lambda path: client.get(path).text


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.usefixtures("no_django_rows")
def test_the_consoles_pages_hide_it(console: Callable[[str], str], secret: str) -> None:
    """Every page of the console, its header and its store errors, hides it."""
    for path in ("/", "/replicas", "/doctor", "/audit"):
        assert not leaked(console(path), secret), path
