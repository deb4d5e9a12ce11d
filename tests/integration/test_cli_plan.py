"""`safebeat plan` and `safebeat prune --orphans` against a real SQLite store and an app module.

The store is filled the way beat fills it (the app's entries compiled and registered),
then the app's code is changed under it, as a deploy would.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from celery import Celery
from click.testing import CliRunner, Result

from safebeat.cli import main
from safebeat.config import config_from_app
from safebeat.entries.app_entries import settings_schedule
from safebeat.identity import Replica
from safebeat.ops import operations
from safebeat.stores.protocols import Definition
from safebeat.stores.sqlite import SqliteStore

REPLICA = Replica("host-a", 1, "aaaaaa")
OLD_CODE = """
from celery import Celery
from celery.schedules import crontab
app = Celery({namespace!r}, broker="memory://")
# Beat runs safebeat.Scheduler: the schedule is beat_schedule, never periodic task rows.
app.conf.update(result_expires=None, safebeat_url={url!r}, timezone="UTC",
    beat_scheduler="safebeat.Scheduler", beat_schedule={{
    "same": {{"task": "t.same", "schedule": 60.0}},
    "retimed": {{"task": "t.retimed", "schedule": crontab(minute=0, hour=3)}},
    "new-args": {{"task": "t.args", "schedule": 300.0, "args": [1]}},
    "gone": {{"task": "t.gone", "schedule": 600.0}},
    "still-running": {{"task": "t.still", "schedule": 600.0}},
}})
"""
NEW_CODE = """
from celery import Celery
from celery.schedules import crontab
app = Celery({namespace!r}, broker="memory://")
# Beat runs safebeat.Scheduler: the schedule is beat_schedule, never periodic task rows.
app.conf.update(result_expires=None, safebeat_url={url!r}, timezone="UTC",
    beat_scheduler="safebeat.Scheduler", beat_schedule={{
    "same": {{"task": "t.same", "schedule": 60.0}},
    "retimed": {{"task": "t.retimed", "schedule": crontab(minute=30, hour=4)}},
    "new-args": {{"task": "t.args", "schedule": 300.0, "args": [2]}},
    "added": {{"task": "t.added", "schedule": crontab(minute=15)}},
    "broken": {{"task": "t.broken", "schedule": "every day"}},
}})
"""


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def deploy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str, namespace: str) -> str:
    """The old code registered in the store by a beat, and the new code as module `-A <name>`."""
    name = f"plan_{namespace.replace('-', '_')}"
    values = {"namespace": namespace, "url": sqlite_url}
    old: dict[str, object] = {}
    exec(OLD_CODE.format(**values), old)  # noqa: S102 - our own text
    old_app = old["app"]
    assert isinstance(old_app, Celery)
    schedule = settings_schedule(old_app, config_from_app(old_app))
    store = SqliteStore(sqlite_url)
    store.migrate()
    store.register(namespace, [e.definition for e in schedule.entries.values()], REPLICA)
    # An entry `safebeat exec` registered is defined by no app, and never an orphan.
    store.register(
        namespace, [Definition("cron-job", "exec crontab 0 1 * * * in UTC", "x")], REPLICA
    )
    # A live replica still runs the old code's `still-running`.
    store.heartbeat(namespace, REPLICA, "0.1", {"still-running": "d"})
    store.close()
    (tmp_path / f"{name}.py").write_text(NEW_CODE.format(**values))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_plan_lists_added_removed_changed_and_broken_entries_and_exits_1(deploy: str) -> None:
    """Each kind of change is listed, a changed schedule with its next windows both ways."""
    result = cli("-A", deploy, "plan")
    assert result.exit_code == 1, result.output
    out = result.output
    assert "  + added: crontab 15 * * * * in UTC" in out
    assert "  - gone: every 600s\n" in out
    assert "  - still-running: every 600s (still run by live host-a:1:aaaaaa)" in out
    assert "  ~ retimed: crontab 0 3 * * * in UTC -> crontab 30 4 * * * in UTC" in out
    assert "  ~ new-args: every 300s (arguments, options or policy changed)" in out
    assert "  ! broken: " in out
    assert "same" not in out
    assert "cron-job" not in out
    assert "6 entries would change" in out
    lines = out.splitlines()
    retimed = lines.index("  ~ retimed: crontab 0 3 * * * in UTC -> crontab 30 4 * * * in UTC")
    before, after = lines[retimed + 1], lines[retimed + 2]
    assert before.startswith("      next windows before: ")
    assert before.count("T03:00:00Z") == 3
    assert after.startswith("      next windows after:  ")
    assert after.count("T04:30:00Z") == 3


def test_plan_json_gives_every_change_with_its_windows(deploy: str) -> None:
    """`plan --json` has one object per change: kind, both schedules and both window lists."""
    result = cli("-A", deploy, "plan", "--json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    changes = {c["name"]: c for c in report["changes"]}
    assert {n: c["kind"] for n, c in changes.items()} == {
        "added": "added",
        "broken": "broken",
        "gone": "removed",
        "new-args": "changed",
        "retimed": "changed",
        "still-running": "removed",
    }
    retimed = changes["retimed"]
    assert [w[11:] for w in retimed["next_before"]] == ["03:00:00Z"] * 3
    assert [w[11:] for w in retimed["next_after"]] == ["04:30:00Z"] * 3
    assert changes["still-running"]["run_by"] == ["host-a:1:aaaaaa"]
    assert (
        "is text, which safebeat reads only for entries added at run time"
        in changes["broken"]["problem"]
    )


def test_plan_exits_0_when_the_store_has_every_entry_as_defined(
    deploy: str, sqlite_url: str, namespace: str
) -> None:
    """Once beat registered the new code and orphans are forgotten, plan has nothing to say."""
    app = importlib.import_module(deploy).app
    schedule = settings_schedule(app, config_from_app(app))
    store = SqliteStore(sqlite_url)
    store.register(namespace, [e.definition for e in schedule.entries.values()], REPLICA)
    store.forget_entry(namespace, "gone")
    store.forget_entry(namespace, "still-running")
    store.close()
    del app.conf.beat_schedule["broken"]
    result = cli("-A", deploy, "plan")
    assert result.exit_code == 0, result.output
    assert "no changes" in result.output


def test_prune_orphans_forgets_what_no_code_defines_and_keeps_what_a_replica_runs(
    deploy: str, sqlite_url: str, namespace: str
) -> None:
    """`prune --orphans` forgets `gone`; `still-running` stays while a live replica runs it;
    entries of `safebeat exec` stay; the history of the forgotten entry stays."""
    result = cli("-A", deploy, "prune", "--orphans")
    assert result.exit_code == 0, result.output
    assert "forgot 'gone'" in result.output
    assert "kept 'still-running'" in result.output
    assert "forgot 1 orphaned entry" in result.output
    states = SqliteStore(sqlite_url).states(namespace)
    assert "gone" not in states
    assert {"still-running", "cron-job", "same", "retimed"} <= states.keys()


def test_prune_orphans_is_audited_per_forgotten_entry(
    deploy: str, sqlite_url: str, namespace: str
) -> None:
    """Each entry `prune --orphans` forgets is recorded as a prune of it by `user@host`; a
    kept one is not."""
    assert cli("-A", deploy, "prune", "--orphans").exit_code == 0
    [record] = SqliteStore(sqlite_url).audit(namespace)
    assert (record.action.value, record.entry) == ("prune", "gone")
    assert record.actor == operations.cli_actor()


def test_plan_and_prune_orphans_need_the_app(sqlite_url: str) -> None:
    """Without -A there is no code to compare with: a usage error, exit 2."""
    for args in (["plan"], ["prune", "--orphans"]):
        result = cli("--url", sqlite_url, *args)
        assert result.exit_code == 2, result.output
        assert "needs the Celery app" in result.output


def test_plan_before_the_first_deploy_lists_every_entry_as_added(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, namespace: str
) -> None:
    """With no SQLite store yet, every entry is added, and the store is not created."""
    url = f"sqlite:///{tmp_path / 'none-yet.sqlite3'}"
    name = f"first_{namespace.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(NEW_CODE.format(namespace=namespace, url=url))
    monkeypatch.syspath_prepend(str(tmp_path))
    result = cli("-A", name, "plan", "--json")
    assert result.exit_code == 1, result.output
    kinds = {c["name"]: c["kind"] for c in json.loads(result.output)["changes"]}
    assert kinds == {
        "same": "added",
        "retimed": "added",
        "new-args": "added",
        "added": "added",
        "broken": "broken",
    }
    assert not (tmp_path / "none-yet.sqlite3").exists()
