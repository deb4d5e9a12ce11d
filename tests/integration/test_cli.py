"""The `safebeat` command line against real stores filled by real beat runs, and
auto-migration turned off."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import redis
from celery import Celery
from click.testing import CliRunner, Result

from safebeat import Scheduler
from safebeat.cli import main
from safebeat.identity import Replica, current_replica
from safebeat.stores.base import Definition, Status
from safebeat.stores.sqlite import MIGRATIONS, SqliteStore
from tests import services
from tests.acceptance.harness import redis_messages, safebeat_messages
from tests.integration.beat import make_app, run

REPLICA = Replica("host-a", 1, "aaaaaa")


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
    scheduler._guard.backoff.until = 0.0  # skip the backoff wait
    scheduler.tick()
    assert scheduler._ready
    assert set(SqliteStore(sqlite_url).states("nomigrate")) == {"a"}


# --- status, history, health, doctor, prune on stores filled by real beat runs ----------


@pytest.fixture
def filled(redis_url: str, sqlite_url: str, namespace: str) -> Iterator[str]:
    """A SQLite store after three seconds of a real scheduler publishing to Redis."""
    queue = f"cli-{namespace}"
    scheduler = Scheduler(make_app(redis_url, queue, sqlite_url, namespace))
    run(scheduler, 3)
    scheduler.close()
    redis.Redis.from_url(redis_url).delete(queue)
    return sqlite_url


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_status_lists_each_entry_with_its_sender_and_the_live_replicas(
    filled: str, namespace: str
) -> None:
    """`status --json` shows the entry, its last sent window, who sent it, the lag, and replicas."""
    result = cli("--url", filled, "--namespace", namespace, "status", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    [entry] = report["entries"]
    assert entry["entry"] == "every-1s"
    assert entry["schedule"] == "every 1s"
    assert entry["sent_by"] == current_replica().id
    assert 0 <= entry["lag"] < 2
    assert entry["last_sent_window"] <= entry["last_window"]
    [replica] = report["replicas"]
    assert replica["replica"] == current_replica().id
    table = cli("--url", filled, "--namespace", namespace, "status")
    assert table.exit_code == 0
    assert "every-1s" in table.output
    assert "(needs -A)" in table.output


def test_history_shows_recent_windows_and_names_an_unknown_entry(
    filled: str, namespace: str
) -> None:
    """`history` lists the newest windows first; a misspelt entry is one line, exit 1."""
    result = cli("--url", filled, "--namespace", namespace, "history", "every-1s", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len(rows) >= 2
    assert [r["window"] for r in rows] == sorted((r["window"] for r in rows), reverse=True)
    assert {r["status"] for r in rows} <= {"sent", "skipped"}
    wrong = cli("--url", filled, "--namespace", namespace, "history", "every1s")
    assert wrong.exit_code == 1
    assert "no entry 'every1s'" in wrong.output
    assert "did you mean 'every-1s'?" in wrong.output
    assert "Traceback" not in wrong.output


def test_health_passes_while_this_host_heartbeats_and_fails_otherwise(
    filled: str, namespace: str, sqlite_url: str
) -> None:
    """`health` exits 0 for a fresh heartbeat on this host, 1 when it is too old or absent."""
    assert cli("--url", filled, "--namespace", namespace, "health").exit_code == 0
    stale = cli("--url", filled, "--namespace", namespace, "health", "--max-age", "1ms")
    assert stale.exit_code == 1
    assert "unhealthy" in stale.output
    nobody = cli("--url", filled, "--namespace", "no-such-app", "health", "--any")
    assert nobody.exit_code == 1


def test_doctor_passes_a_healthy_setup_and_flags_claims_left_unsent(
    filled: str, namespace: str
) -> None:
    """`doctor` exits 0 on a healthy store and 1 once a claim stayed unsent for long."""
    healthy = cli("--url", filled, "--namespace", namespace, "doctor", "--json")
    assert healthy.exit_code == 0, healthy.output
    assert {f["level"] for f in json.loads(healthy.output)} <= {"ok", "warning"}

    store = SqliteStore(filled)
    [row] = store.history(namespace, "every-1s", limit=1)
    store.close()
    with sqlite3.connect(SqliteStore(filled).path) as conn:  # a claim lost 10 minutes ago
        conn.execute(
            "UPDATE safebeat_dispatch SET status = 'claimed', claimed_at = claimed_at - ? "
            "WHERE id = ?",
            (600_000_000, row.id),
        )
    sick = cli("--url", filled, "--namespace", namespace, "doctor")
    assert sick.exit_code == 1
    assert "problem  unsent claims: 1 claim(s) unsent" in sick.output


def test_doctor_on_an_unreachable_store_is_one_line_without_the_password() -> None:
    """An unreachable store is a problem finding, exit 1, the password hidden."""
    url = f"postgresql://app:hunter2@127.0.0.1:{services.free_port()}/app"
    result = cli("--url", url, "doctor")
    assert result.exit_code == 1
    assert "problem  store: cannot reach the store" in result.output
    assert "hunter2" not in result.output
    assert "Traceback" not in result.output


def test_doctor_reports_a_redis_eviction_policy_that_can_drop_claims(namespace: str) -> None:
    """On Redis with allkeys-lru, doctor reports the eviction hazard as a problem."""
    server = services.start_redis_server(
        None, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"
    )
    try:
        assert cli("--url", server.url, "migrate").exit_code == 0
        result = cli("--url", server.url, "--namespace", namespace, "doctor")
    finally:
        server.stop()
    assert result.exit_code == 1
    assert "problem  redis eviction: maxmemory-policy is allkeys-lru" in result.output


def test_prune_deletes_history_older_than_asked(filled: str, namespace: str) -> None:
    """`prune --older-than 0s` deletes every dispatch row and says how many."""
    before = SqliteStore(filled).history(namespace, limit=1000)
    result = cli("--url", filled, "--namespace", namespace, "prune", "--older-than", "0s")
    assert result.exit_code == 0, result.output
    assert f"pruned {len(before)} row(s)" in result.output
    assert SqliteStore(filled).history(namespace) == []


def test_status_with_an_app_shows_next_windows(tmp_path: Path, sqlite_url: str) -> None:
    """`python -m safebeat -A proj status --json` compiles the app's schedule for next windows."""
    (tmp_path / "cliproj.py").write_text(
        "from celery import Celery\n"
        "from celery.schedules import crontab\n"
        "app = Celery('cliproj', broker='memory://')\n"
        f"app.conf.update(result_expires=None, safebeat_url={sqlite_url!r}, beat_schedule={{\n"
        "    'nightly': {'task': 'cliproj.t', 'schedule': crontab(minute=0, hour=3)}})\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    migrate = subprocess.run(
        [sys.executable, "-m", "safebeat", "-A", "cliproj", "migrate"], env=env, check=False
    )
    assert migrate.returncode == 0
    store = SqliteStore(sqlite_url)
    store.register("cliproj", [Definition("nightly", "crontab 0 3 * * * in UTC", "d")], REPLICA)
    store.close()
    result = subprocess.run(
        [sys.executable, "-m", "safebeat", "-A", "cliproj", "status", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    [entry] = json.loads(result.stdout)["entries"]
    assert entry["next_window"].endswith("T03:00:00Z")


# --- pause, resume, trigger, backfill -------------------------------------------------------


@pytest.fixture
def app_module(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    redis_url: str,
    sqlite_url: str,
    namespace: str,
) -> Iterator[str]:
    """An importable Celery app module (`-A <name>`) with one entry every 60 s."""
    name = f"cliops_{namespace.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        "from celery import Celery\n"
        f"app = Celery({namespace!r}, broker={redis_url!r})\n"
        f"app.conf.update(result_expires=None, safebeat_url={sqlite_url!r},\n"
        f"    task_default_queue={namespace!r},\n"
        "    beat_schedule={'report': {'task': 'ops.report', 'schedule': 60.0}})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    redis.Redis.from_url(redis_url).delete(namespace)


def registered(sqlite_url: str, namespace: str) -> SqliteStore:
    store = SqliteStore(sqlite_url)
    store.migrate()
    store.register(namespace, [Definition("report", "every 60s", "d")], REPLICA)
    return store


def test_pause_and_resume_flag_the_entry_for_every_replica(sqlite_url: str, namespace: str) -> None:
    """`pause` sets the store's flag, `resume` clears it; an unknown entry is one line, exit 1."""
    store = registered(sqlite_url, namespace)
    paused = cli("--url", sqlite_url, "--namespace", namespace, "pause", "report")
    assert paused.exit_code == 0, paused.output
    assert store.states(namespace)["report"].paused
    assert cli("--url", sqlite_url, "--namespace", namespace, "resume", "report").exit_code == 0
    assert not store.states(namespace)["report"].paused
    unknown = cli("--url", sqlite_url, "--namespace", namespace, "pause", "reprot")
    assert unknown.exit_code == 1
    assert "no entry 'reprot' is registered" in unknown.output


def test_trigger_publishes_one_extra_run_recorded_as_such(
    app_module: str, sqlite_url: str, redis_url: str, namespace: str
) -> None:
    """`trigger` sends the task now with safebeat's headers and records a `trigger` row."""
    store = registered(sqlite_url, namespace)
    result = cli("-A", app_module, "trigger", "report")
    assert result.exit_code == 0, result.output
    assert "window" in result.output
    assert "sent" in result.output
    [message] = safebeat_messages(redis_messages(redis_url, namespace))
    [row] = store.history(namespace, "report")
    assert (row.status, row.reason, row.task_id) == (Status.SENT, "trigger", message.task_id)
    assert message.window == row.window
    assert store.states(namespace)["report"].last_window is None  # the schedule is untouched
    without_app = cli("--url", sqlite_url, "--namespace", namespace, "trigger", "report")
    assert without_app.exit_code == 2
    assert "give the app with -A" in without_app.output


def test_backfill_sends_only_the_windows_never_sent(
    app_module: str, sqlite_url: str, redis_url: str, namespace: str
) -> None:
    """`backfill` claims the range's windows without a row, leaves sent ones, refuses the future."""
    store = registered(sqlite_url, namespace)
    anchor = store.states(namespace)["report"].anchor
    start, end = anchor - timedelta(minutes=5), anchor - timedelta(seconds=1)

    def iso(instant: datetime) -> str:
        return instant.isoformat().replace("+00:00", "Z")

    first = cli("-A", app_module, "backfill", "report", "--from", iso(start), "--to", iso(end))
    assert first.exit_code == 0, first.output
    messages = safebeat_messages(redis_messages(redis_url, namespace))
    assert len(messages) == 5
    assert all(start <= m.window <= end for m in messages)
    rows = store.history(namespace, "report")
    assert {(r.status, r.reason) for r in rows} == {(Status.SENT, "backfill")}

    again = cli("-A", app_module, "backfill", "report", "--from", iso(start), "--to", iso(end))
    assert again.exit_code == 0, again.output
    assert "5 window(s) already had a row" in again.output
    assert len(safebeat_messages(redis_messages(redis_url, namespace))) == 5  # none added

    future = cli(
        "-A", app_module, "backfill", "report", "--from", iso(start), "--to", "2999-01-01T00:00:00Z"
    )
    assert future.exit_code == 1
    assert "is in the future" in future.output
    naive = cli("-A", app_module, "backfill", "report", "--from", "2026-01-01", "--to", iso(end))
    assert naive.exit_code == 2
    assert "has no time zone" in naive.output
