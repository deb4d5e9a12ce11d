"""`safebeat schedule add|list|remove` against a real SQLite store, and the commands that
compare the store with the app (plan, prune --orphans, status) seeing entries added so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from safebeat.cli import main
from safebeat.stores.sqlite import SqliteStore


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def app_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str, namespace: str
) -> str:
    """An importable Celery app module (`-A <name>`) with one entry, `report`, every 60 s."""
    name = f"cli_schedule_{namespace.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        "from celery import Celery\n"
        f"app = Celery({namespace!r}, broker='memory://')\n"
        f"app.conf.update(result_expires=None, safebeat_url={sqlite_url!r},\n"
        "    beat_scheduler='safebeat.Scheduler',\n"
        "    beat_schedule={'report': {'task': 'ops.report', 'schedule': 60.0}})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_add_list_and_remove_an_entry(app_module: str, sqlite_url: str, namespace: str) -> None:
    """add stores the entry as JSON, list shows it, remove deletes it; each says so."""
    added = cli(
        "-A", app_module, "schedule", "add", "digest", "ops.digest",
        "--crontab", "0 9 * * 1-5", "--timezone", "Europe/Berlin", "--kwargs", '{"tenant": 42}',
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    assert "added 'digest' (crontab 0 9 * * 1-5 in Europe/Berlin)" in added.output
    listed = cli("-A", app_module, "schedule", "list", "--json")
    assert listed.exit_code == 0, listed.output
    [entry] = json.loads(listed.output)
    assert entry["name"] == "digest"
    assert entry["schedule"] == {"crontab": "0 9 * * 1-5"}
    assert entry["kwargs"] == {"tenant": 42}
    assert entry["options"] == {"safebeat": {"timezone": "Europe/Berlin"}}
    table = cli("-A", app_module, "schedule", "list")
    assert "digest" in table.output
    assert "ops.digest" in table.output
    removed = cli("-A", app_module, "schedule", "remove", "digest")
    assert removed.exit_code == 0, removed.output
    assert SqliteStore(sqlite_url).runtime_entries(namespace) == {}
    again = cli("-A", app_module, "schedule", "remove", "digest")
    assert again.exit_code == 1
    assert "no entry 'digest' was added at run time" in again.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["report", "ops.x", "--every", "30s"], "beat_schedule"),
        (["x", "ops.x"], "exactly one of --every, --crontab and --at"),
        (["x", "ops.x", "--every", "5s", "--at", "2030-01-01T00:00:00Z"], "exactly one"),
        (["x", "ops.x", "--crontab", "0 25 * * *"], "crontab '0 25 * * *'"),
        (["x", "ops.x", "--crontab", "0 9 * *"], "expected 5 cron fields"),
        (["x", "ops.x", "--at", "tomorrow"], "--at 'tomorrow'"),
        (["x", "ops.x", "--every", "1m", "--kwargs", "[1]"], "--kwargs must be a JSON dict"),
        (["x", "ops.x", "--every", "1m", "--timezone", "Mars/Base"], "unknown time zone"),
    ],
)
def test_add_refuses_what_beat_could_not_run_in_one_line(
    app_module: str, sqlite_url: str, namespace: str, args: list[str], message: str
) -> None:
    """A name the code defines, a missing or doubled schedule, a bad crontab, time or zone:
    one line naming the problem, a non-zero exit, and nothing stored."""
    result = cli("-A", app_module, "schedule", "add", *args)
    assert result.exit_code != 0
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
    store = SqliteStore(sqlite_url)
    store.migrate()
    assert store.runtime_entries(namespace) == {}


def test_add_twice_is_refused_and_replace_changes_it(app_module: str) -> None:
    """A second add of one name is refused; --replace changes the stored definition."""
    assert (
        cli("-A", app_module, "schedule", "add", "poll", "ops.poll", "--every", "30s").exit_code
        == 0
    )
    twice = cli("-A", app_module, "schedule", "add", "poll", "ops.poll", "--every", "10s")
    assert twice.exit_code == 1
    assert "already added" in twice.output
    replaced = cli(
        "-A", app_module, "schedule", "add", "poll", "ops.poll", "--every", "10s", "--replace"
    )
    assert replaced.exit_code == 0, replaced.output
    [entry] = json.loads(cli("-A", app_module, "schedule", "list", "--json").output)
    assert entry["schedule"] == {"every": 10.0}


def test_plan_and_prune_orphans_count_an_added_entry_as_defined(
    app_module: str, sqlite_url: str, namespace: str
) -> None:
    """Once beat registered an added entry, plan reports no change and prune --orphans keeps
    its state: it is defined, in the store rather than in code."""
    from safebeat import Scheduler
    from safebeat.cli.app import load_app

    assert (
        cli("-A", app_module, "schedule", "add", "poll", "ops.poll", "--every", "30s").exit_code
        == 0
    )
    store = SqliteStore(sqlite_url)
    scheduler = Scheduler(load_app(app_module), store=store)
    scheduler.tick()
    assert "poll" in store.states(namespace)
    plan = cli("-A", app_module, "plan")
    assert plan.exit_code == 0, plan.output
    prune = cli("-A", app_module, "prune", "--orphans")
    assert prune.exit_code == 0, prune.output
    assert "forgot 0 orphaned entries" in prune.output
    assert "poll" in store.states(namespace)
    status = cli("-A", app_module, "status", "--json")
    assert [e["entry"] for e in json.loads(status.output)["entries"]] == ["poll", "report"]
