"""The `safebeat` command line against real stores, and auto-migration turned off."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from celery import Celery
from click.testing import CliRunner

from safebeat import Scheduler
from safebeat.cli import main
from safebeat.stores.sqlite import MIGRATIONS, SqliteStore
from tests import services


def test_migrate_creates_the_schema_and_is_idempotent(sqlite_url: str) -> None:
    """`safebeat --url ... migrate` creates the tables once and reports the version each time."""
    runner = CliRunner()
    for _ in range(2):
        result = runner.invoke(main, ["--url", sqlite_url, "migrate"])
        assert result.exit_code == 0, result.output
        assert f"schema at version {len(MIGRATIONS)}" in result.output
    assert SqliteStore(sqlite_url).schema_version() == len(MIGRATIONS)


def test_migrate_reads_the_url_from_the_environment(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --url or -A, SAFEBEAT_URL names the store."""
    monkeypatch.setenv("SAFEBEAT_URL", sqlite_url)
    result = CliRunner().invoke(main, ["migrate"])
    assert result.exit_code == 0, result.output
    assert sqlite_url in result.output


def test_unreachable_store_fails_with_the_password_hidden() -> None:
    """A store that cannot be reached exits non-zero, naming it without its password."""
    url = f"postgresql://app:hunter2@127.0.0.1:{services.free_port()}/app"
    result = CliRunner().invoke(main, ["--url", url, "migrate"])
    assert result.exit_code == 1
    assert "postgresql://app:***@127.0.0.1" in result.output
    assert "hunter2" not in result.output


def test_without_auto_migrate_beat_waits_for_safebeat_migrate(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With safebeat_auto_migrate off, beat says to run `safebeat migrate` and claims nothing."""
    app = Celery("nomigrate", broker="memory://", set_as_current=False)
    app.conf.update(
        beat_schedule={"a": {"task": "t.run", "schedule": timedelta(seconds=1)}},
        result_expires=None,
        safebeat_url=sqlite_url,
        safebeat_auto_migrate=False,
    )
    with caplog.at_level(logging.ERROR, "safebeat"):
        scheduler = Scheduler(app)
    assert "run `safebeat migrate`" in caplog.text
    assert SqliteStore(sqlite_url).schema_version() == 0
    assert CliRunner().invoke(main, ["--url", sqlite_url, "migrate"]).exit_code == 0
    scheduler._retry_at = 0.0  # skip the backoff wait
    scheduler.tick()
    assert scheduler._ready
    assert set(SqliteStore(sqlite_url).states("nomigrate")) == {"a"}
