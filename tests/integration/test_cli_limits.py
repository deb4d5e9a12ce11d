"""The `safebeat` command line at the limits (docs/limits.md): a value no store could hold and
read back is one line naming it and the limit, with no traceback, and nothing is stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from safebeat.cli import main
from safebeat.identity import Replica
from safebeat.stores.protocols import Definition
from safebeat.stores.sqlite import SqliteStore

REPLICA = Replica("host-a", 1, "aaaaaa")


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def one_line_error(result: Result, *expected: str) -> None:
    """The command failed with one line saying each of `expected`, and no traceback."""
    assert result.exit_code in {1, 2}, result.output
    assert "unexpected" not in result.output
    assert "Traceback" not in result.output
    for text in expected:
        assert text in result.output, result.output


@pytest.fixture
def store(sqlite_url: str, namespace: str) -> Iterator[SqliteStore]:
    store = SqliteStore(sqlite_url)
    store.migrate()
    store.register(namespace, [Definition("report", "every 60s", "d")], REPLICA)
    yield store
    store.close()


@pytest.fixture
def app_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str, namespace: str
) -> str:
    """An importable Celery app (`-A <name>`) with one entry every 60 s, on the memory broker."""
    name = f"clilimits_{namespace.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        "from celery import Celery\n"
        f"app = Celery({namespace!r}, broker='memory://')\n"
        f"app.conf.update(result_expires=None, safebeat_url={sqlite_url!r},\n"
        "    beat_scheduler='safebeat.Scheduler',\n"
        "    beat_schedule={'report': {'task': 'ops.report', 'schedule': 60.0}})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_a_pause_ending_after_9999_in_utc_is_refused_and_status_still_works(
    store: SqliteStore, sqlite_url: str, namespace: str
) -> None:
    """`pause --until 9999-12-31T23:59:59-12:00` (10000-01-01 in UTC) stored the pause, then
    every read of the namespace failed; now it is refused naming --until, and nothing is
    stored."""
    result = cli(
        "--url", sqlite_url, "--namespace", namespace,
        "pause", "report", "--until", "9999-12-31T23:59:59-12:00",
    )  # fmt: skip
    one_line_error(result, "--until", "9999-12-31T23:59:59-12:00", "years 2 to 9998")
    assert not store.states(namespace)["report"].paused
    status = cli("--url", sqlite_url, "--namespace", namespace, "status", "--json")
    assert status.exit_code == 0, status.output
    assert [e["entry"] for e in json.loads(status.output)["entries"]] == ["report"]


def test_backfill_from_year_1_is_refused_naming_the_option(
    store: SqliteStore, app_module: str
) -> None:
    """`backfill --from 0001-01-01T00:00:00Z` was an unexpected OverflowError."""
    result = cli(
        "-A", app_module, "backfill", "report",
        "--from", "0001-01-01T00:00:00Z", "--to", "2020-01-01T00:00:00Z",
    )  # fmt: skip
    one_line_error(result, "--from", "years 2 to 9998")


@pytest.mark.parametrize("at", ["9999-12-31T23:59:59-12:00", "0001-01-01T00:00:00+14:00"])
def test_schedule_add_at_the_edges_of_time_is_refused(
    store: SqliteStore, app_module: str, namespace: str, at: str
) -> None:
    """`schedule add --at` an instant with no UTC datetime was an unexpected OverflowError."""
    result = cli("-A", app_module, "schedule", "add", "once", "t.run", "--at", at)
    one_line_error(result, "'once'", "one-off time", "years 2 to 9998")
    assert store.runtime_entries(namespace) == {}


def test_schedule_add_with_kwargs_nested_5000_deep_is_refused(
    store: SqliteStore, app_module: str, namespace: str
) -> None:
    """`--kwargs` nested 5,000 deep was an unexpected RecursionError."""
    deep = '{"a": ' + "[" * 5000 + "]" * 5000 + "}"
    result = cli(
        "-A", app_module, "schedule", "add", "deep", "t.run", "--every", "1m", "--kwargs", deep
    )
    one_line_error(result, "--kwargs", "more than 100 deep")
    assert store.runtime_entries(namespace) == {}


@pytest.mark.parametrize("name", ["a\x00b", "x" * 256, "red\x1b[31m"])
def test_schedule_add_of_a_name_no_store_holds_is_refused(
    store: SqliteStore, app_module: str, namespace: str, name: str
) -> None:
    """A NUL (which made every tick re-register on SQLite and fail on PostgreSQL), a control
    character or more than 255 bytes: refused, naming the limit."""
    result = cli("-A", app_module, "schedule", "add", name, "t.run", "--every", "1m")
    one_line_error(result, "limits: docs/limits.md")
    assert store.runtime_entries(namespace) == {}


def test_a_namespace_with_a_brace_is_refused(sqlite_url: str) -> None:
    """`--namespace '}x'` would spread a namespace's Redis Cluster keys over slots."""
    result = cli("--url", sqlite_url, "--namespace", "}x", "status")
    one_line_error(result, "--namespace", "hash tag")
