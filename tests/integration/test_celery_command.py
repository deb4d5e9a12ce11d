"""`celery -A proj safebeat ...`: the `safebeat` commands inside Celery's own command line,
run as real `celery` processes against a real store and a real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import redis
from click.testing import CliRunner

from safebeat.cli import main
from safebeat.identity import Replica
from safebeat.stores.protocols import Definition, Status
from safebeat.stores.sqlite import SqliteStore
from tests.acceptance.harness import redis_messages, safebeat_messages

BIN = Path(sys.executable).parent


@pytest.fixture
def project(tmp_path: Path, sqlite_url: str, namespace: str, redis_url: str) -> Iterator[Path]:
    """A folder holding `proj.py`: an app whose own broker (memory://) reaches no other process."""
    (tmp_path / "proj.py").write_text(
        "from celery import Celery\n"
        f"app = Celery({namespace!r}, broker='memory://')\n"
        f"app.conf.update(result_expires=None, safebeat_url={sqlite_url!r},\n"
        f"    task_default_queue={namespace!r},\n"
        "    beat_schedule={'report': {'task': 'proj.report', 'schedule': 60.0}})\n"
    )
    store = SqliteStore(sqlite_url)
    store.migrate()
    store.register(namespace, [Definition("report", "every 60s", "d")], Replica("host-a", 1, "a"))
    store.close()
    yield tmp_path
    redis.Redis.from_url(redis_url).delete(namespace)


def run(program: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `program` (`celery` or `safebeat` from this venv) in `cwd`, as an operator would."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SAFEBEAT_", "CELERY_"))}
    return subprocess.run(
        [str(BIN / program), *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(cwd)},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def without_ages(report: dict[str, Any]) -> dict[str, Any]:
    """A `status --json` report without heartbeat ages, which grow between two runs."""
    for replica in report["replicas"]:
        del replica["heartbeat_age"]
    return report


def test_celery_safebeat_status_reports_what_safebeat_status_reports(
    project: Path, namespace: str
) -> None:
    """`celery -A proj safebeat status` prints the report `safebeat -A proj status` prints."""
    reports = []
    for program, args in [
        ("celery", ["-A", "proj", "safebeat", "status", "--json"]),
        ("safebeat", ["-A", "proj", "status", "--json"]),
    ]:
        result = run(program, *args, cwd=project)
        assert result.returncode == 0, result.stderr
        reports.append(without_ages(json.loads(result.stdout)))
    assert reports[0] == reports[1]
    assert reports[0]["namespace"] == namespace
    assert [e["entry"] for e in reports[0]["entries"]] == ["report"]
    tables = [
        run("celery", "-A", "proj", "safebeat", "status", cwd=project),
        run("safebeat", "-A", "proj", "status", cwd=project),
    ]
    assert tables[0].returncode == tables[1].returncode == 0
    assert tables[0].stdout.split("\nreplicas:")[0] == tables[1].stdout.split("\nreplicas:")[0]


def test_celery_broker_option_is_where_trigger_publishes(
    project: Path, sqlite_url: str, redis_url: str, namespace: str
) -> None:
    """`celery -A proj -b URL safebeat trigger` publishes to URL, not to the app's own broker."""
    result = run(
        "celery", "-A", "proj", "-b", redis_url, "safebeat", "trigger", "report", cwd=project
    )
    assert result.returncode == 0, result.stderr
    [message] = safebeat_messages(redis_messages(redis_url, namespace))
    [row] = SqliteStore(sqlite_url).history(namespace, "report")
    assert (row.status, row.reason, row.task_id) == (Status.SENT, "trigger", message.task_id)


def test_a_second_app_after_the_command_is_refused(project: Path) -> None:
    """`celery -A proj safebeat status -A other` exits 2 saying to give -A once, before safebeat."""
    result = run("celery", "-A", "proj", "safebeat", "status", "-A", "other", cwd=project)
    assert result.returncode == 2
    assert "give -A once, before `safebeat`" in result.stderr
    assert "Traceback" not in result.stderr


def test_without_celery_app_option_the_store_comes_from_url(
    project: Path, sqlite_url: str, namespace: str
) -> None:
    """Without celery's -A, `celery safebeat --url` reads the store alone, as `safebeat --url`."""
    result = run(
        "celery", "safebeat", "--url", sqlite_url, "--namespace", namespace, "status", cwd=project
    )
    assert result.returncode == 0, result.stderr
    assert "report" in result.stdout
    assert "(needs -A)" in result.stdout  # celery's default app is not taken for the user's


def test_celery_lists_safebeat_with_the_same_commands_and_help() -> None:
    """`celery --help` lists safebeat; each `celery safebeat X --help` is `safebeat X --help`."""
    from celery.bin.celery import celery  # imported here: it patches click on import

    runner = CliRunner()
    top = runner.invoke(celery, ["--help"], terminal_width=100)
    assert top.exit_code == 0, top.output
    assert "safebeat" in top.output
    group = runner.invoke(celery, ["safebeat", "--help"], terminal_width=100)
    assert group.exit_code == 0, group.output
    names = main.list_commands(click.Context(main))
    assert names
    for name in names:
        assert f"  {name} " in group.output
        ours = runner.invoke(celery, ["safebeat", name, "--help"], terminal_width=100)
        theirs = runner.invoke(main, [name, "--help"], prog_name="safebeat", terminal_width=100)
        assert ours.exit_code == theirs.exit_code == 0, ours.output
        assert ours.output.replace("celery safebeat", "safebeat", 1) == theirs.output
