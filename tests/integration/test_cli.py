"""The `safebeat` command line against real stores filled by real beat runs, and
auto-migration turned off."""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis
from celery import Celery
from click.testing import CliRunner, Result

from safebeat import Scheduler
from safebeat.cli import main
from safebeat.identity import Replica, current_replica
from safebeat.liveness import LIVE_WITHIN
from safebeat.ops import operations
from safebeat.records import AuditAction, AuditEvent
from safebeat.stores.protocols import Definition, Status
from safebeat.stores.sqlite import MIGRATIONS, SqliteStore
from safebeat.testing import FakeClock
from tests import services
from tests.acceptance.harness import Cluster, redis_messages, safebeat_messages
from tests.integration.beat import make_app, tick_until

REPLICA = Replica("host-a", 1, "aaaaaa")
OTHER = Replica("host-b", 2, "bbbbbb")
SECOND = timedelta(seconds=1)


def test_migrate_creates_the_schema_and_is_idempotent(sqlite_url: str) -> None:
    """`safebeat --url ... migrate` creates the tables once and reports the version each time."""
    runner = CliRunner()
    for _ in range(2):
        result = runner.invoke(main, ["--url", sqlite_url, "migrate"])
        assert result.exit_code == 0, result.output
        assert f"schema at version {MIGRATIONS[-1].version}" in result.output
    assert SqliteStore(sqlite_url).schema_version() == MIGRATIONS[-1].version


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
    scheduler.engine.guard.backoff.until = 0.0  # skip the backoff wait
    scheduler.tick()
    assert scheduler.engine.ready
    assert set(SqliteStore(sqlite_url).states("nomigrate")) == {"a"}


# --- status, history, health, doctor, prune on stores filled by real beat runs ----------


@pytest.fixture
def running(redis_url: str, sqlite_url: str, namespace: str) -> Iterator[Scheduler]:
    """A real scheduler that published two windows to Redis and is still running."""
    queue = f"cli-{namespace}"
    clock = FakeClock()
    app = make_app(redis_url, queue, sqlite_url, namespace)
    scheduler = Scheduler(app, monotonic=clock.monotonic)
    tick_until(scheduler, clock, lambda: scheduler.metrics.totals.dispatched >= 2)
    yield scheduler
    scheduler.close()
    redis.Redis.from_url(redis_url).delete(queue)


@pytest.fixture
def filled(running: Scheduler, sqlite_url: str) -> str:
    """The SQLite store of `running`: its history, and its replica's heartbeat."""
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
    assert replica["live"] is True
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
    missing = cli("--url", filled, "--namespace", namespace, "history")
    assert missing.exit_code == 2
    assert (
        f"Missing argument 'ENTRY': name an entry of namespace {namespace!r}: 'every-1s'"
        in missing.output
    )


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
    """An importable Celery app module (`-A <name>`) with one entry every 60 s, whose beat
    runs `safebeat.Scheduler` (so the CLI reads no periodic task rows, whatever Django other
    tests in this process configured)."""
    name = f"cliops_{namespace.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        "from celery import Celery\n"
        f"app = Celery({namespace!r}, broker={redis_url!r})\n"
        f"app.conf.update(result_expires=None, safebeat_url={sqlite_url!r},\n"
        f"    task_default_queue={namespace!r}, beat_scheduler='safebeat.Scheduler',\n"
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
    # Sent by the operator, not by a short-lived process no replica list shows.
    assert row.host == operations.cli_actor()
    status = json.loads(cli("-A", app_module, "status", "--json").output)["entries"]
    assert [e["sent_by"] for e in status] == [f"trigger by {operations.cli_actor()}"]


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
    assert "5 windows already had a row" in again.output
    assert len(safebeat_messages(redis_messages(redis_url, namespace))) == 5  # none added

    future = cli(
        "-A", app_module, "backfill", "report", "--from", iso(start), "--to", "2999-01-01T00:00:00Z"
    )
    assert future.exit_code == 1
    assert "is in the future" in future.output
    naive = cli("-A", app_module, "backfill", "report", "--from", "2026-01-01", "--to", iso(end))
    assert naive.exit_code == 2
    assert "has no time zone" in naive.output


# --- the audit trail: every operator action, with who did it --------------------------------


def iso(instant: datetime) -> str:
    return instant.isoformat().replace("+00:00", "Z")


def test_pause_until_with_a_note_shows_in_status_and_is_audited(
    sqlite_url: str, namespace: str
) -> None:
    """`pause --until --note` keeps the end and note for every replica, `status` says
    "paused until ... (note)", and the audit trail records the OS user, the end and note."""
    store = registered(sqlite_url, namespace)
    until = (store.clock() + timedelta(hours=2)).replace(microsecond=0)
    args = ("--url", sqlite_url, "--namespace", namespace)
    paused = cli(*args, "pause", "report", "--until", iso(until), "--note", "db upgrade")
    assert paused.exit_code == 0, paused.output
    assert f"until {iso(until)}, then resumes by itself" in paused.output
    state = store.states(namespace)["report"]
    assert (state.paused, state.paused_until, state.pause_note) == (True, until, "db upgrade")
    status = cli(*args, "status")
    assert "report (paused)" in status.output
    assert f"  report: paused until {iso(until)} (db upgrade)\n" in status.output
    shown = json.loads(cli(*args, "status", "--json").output)["entries"][0]
    assert (shown["paused_until"], shown["pause_note"]) == (iso(until), "db upgrade")
    [record] = store.audit(namespace)
    assert (record.action.value, record.entry, record.windows, record.note) == (
        "pause",
        "report",
        (until,),
        "db upgrade",
    )
    assert record.actor == operations.cli_actor()
    assert "@" in record.actor


def test_pause_until_an_instant_already_past_is_refused(sqlite_url: str, namespace: str) -> None:
    """A pause that would have ended already is refused in one line, and nothing changes."""
    store = registered(sqlite_url, namespace)
    args = ("--url", sqlite_url, "--namespace", namespace)
    result = cli(*args, "pause", "report", "--until", "2020-01-01T00:00:00Z")
    assert result.exit_code == 1
    assert "is not in the future" in result.output
    assert not store.states(namespace)["report"].paused
    assert store.audit(namespace) == []


def test_resume_is_audited_with_the_os_user_and_host(sqlite_url: str, namespace: str) -> None:
    """`resume --note` records a resume by `user@host` with the note."""
    store = registered(sqlite_url, namespace)
    args = ("--url", sqlite_url, "--namespace", namespace)
    assert cli(*args, "pause", "report").exit_code == 0
    assert cli(*args, "resume", "report", "--note", "upgrade done").exit_code == 0
    record = store.audit(namespace)[0]
    assert (record.action.value, record.entry, record.note) == ("resume", "report", "upgrade done")
    assert record.actor == operations.cli_actor()


def test_trigger_is_audited_with_its_window(
    app_module: str, sqlite_url: str, namespace: str
) -> None:
    """`trigger --note` records a trigger of the entry, with the window it sent."""
    store = registered(sqlite_url, namespace)
    assert cli("-A", app_module, "trigger", "report", "--note", "rerun").exit_code == 0
    [row] = store.history(namespace, "report")
    [record] = store.audit(namespace)
    assert (record.action.value, record.entry, record.windows, record.note) == (
        "trigger",
        "report",
        (row.window,),
        "rerun",
    )


def test_backfill_is_audited_with_the_windows_it_claimed(
    app_module: str, sqlite_url: str, namespace: str
) -> None:
    """`backfill` records the windows it claimed, oldest first; a repeat claims none."""
    store = registered(sqlite_url, namespace)
    anchor = store.states(namespace)["report"].anchor
    span = ("--from", iso(anchor - timedelta(minutes=3)), "--to", iso(anchor - SECOND))
    assert cli("-A", app_module, "backfill", "report", *span).exit_code == 0
    assert cli("-A", app_module, "backfill", "report", *span).exit_code == 0
    again, first = store.audit(namespace)
    windows = sorted(r.window for r in store.history(namespace, "report"))
    assert (first.action.value, first.entry, list(first.windows)) == ("backfill", "report", windows)
    assert len(windows) == 3
    assert (again.action.value, again.windows) == ("backfill", ())


def test_prune_is_audited_with_its_cutoff(filled: str, namespace: str) -> None:
    """`prune` records who pruned, and up to when, in the trail it prunes too."""
    assert cli("--url", filled, "--namespace", namespace, "prune").exit_code == 0
    [record] = SqliteStore(filled).audit(namespace)
    assert (record.action.value, record.entry) == ("prune", None)
    assert record.note is not None
    assert record.note.startswith("before ")
    assert record.actor == operations.cli_actor()


def test_migrate_is_audited_with_the_schema_version(sqlite_url: str, namespace: str) -> None:
    """`migrate` records who migrated to which version, in the namespace it runs for; a
    second `migrate`, with nothing to do, says so and records nothing."""
    result = cli("--url", sqlite_url, "--namespace", namespace, "migrate")
    assert result.exit_code == 0, result.output
    [record] = SqliteStore(sqlite_url).audit(namespace)
    note = f"schema at version {MIGRATIONS[-1].version}"  # the highest number: may skip one
    assert (record.action.value, record.note) == ("migrate", note)
    again = cli("--url", sqlite_url, "--namespace", namespace, "migrate")
    assert again.exit_code == 0, again.output
    assert "already; nothing to do" in again.output
    assert len(SqliteStore(sqlite_url).audit(namespace)) == 1


def test_audit_lists_actions_newest_first_by_entry_and_as_json(
    sqlite_url: str, namespace: str
) -> None:
    """`safebeat audit` prints who did what, newest first; --entry filters, --limit
    bounds, --json gives every field."""
    store = registered(sqlite_url, namespace)
    store.register(namespace, [Definition("other", "every 60s", "d")], REPLICA)
    args = ("--url", sqlite_url, "--namespace", namespace)
    for command in (
        ("pause", "report", "--note", "first"),
        ("pause", "other"),
        ("resume", "report"),
    ):
        assert cli(*args, *command).exit_code == 0
    table = cli(*args, "audit").output.splitlines()
    assert table[0].split() == ["when", "who", "action", "entry", "windows", "note"]
    assert [line.split()[2:4] for line in table[2:]] == [
        ["resume", "report"],
        ["pause", "other"],
        ["pause", "report"],
    ]
    listed = json.loads(cli(*args, "audit", "--entry", "report", "--json").output)
    assert [(r["action"], r["note"]) for r in listed] == [("resume", None), ("pause", "first")]
    assert listed[0]["actor"] == operations.cli_actor()
    assert len(json.loads(cli(*args, "audit", "--limit", "1", "--json").output)) == 1


# A name that tries to forge a row (a newline, then what a row says) and a colour.
FORGING = "report\nforged  2099-01-01T00:00:00Z  \x1b[31mrunning\x1b[0m"


def test_control_characters_print_as_escapes_and_forge_no_row_or_colour(
    sqlite_url: str, namespace: str
) -> None:
    """An entry name, a replica, an audit actor and a note holding a newline and
    `ESC[31m` print as `\\n` and `\\x1b` in status, history, audit and doctor: every row
    stays one line, and nothing reaches the terminal as a control sequence."""
    store = registered(sqlite_url, namespace)
    replica = Replica("host\x1b[2J", 7, "cccccc")
    store.register(namespace, [Definition(FORGING, "every 60s", "d")], replica)
    store.heartbeat(namespace, replica, "1.0\r", {FORGING: "d"})
    store.record_audit(
        namespace,
        AuditEvent("mallory\n\x1b[32mops", AuditAction.PAUSE, entry=FORGING, note="\x1b]0;x\x07"),
    )
    args = ["--url", sqlite_url, "--namespace", namespace]

    def terminal(*command: str) -> str:
        """The output as a terminal gets it (click strips colours only from a pipe)."""
        return CliRunner().invoke(main, [*args, *command], color=True).output

    for command in (("status",), ("history", FORGING), ("audit",), ("doctor",)):
        output = terminal(*command)
        assert not [c for c in output if c not in "\n" and not c.isprintable()], command
        assert "\nforged" not in output, command
    assert "report\\nforged  2099-01-01T00:00:00Z  \\x1b[31mrunning" in terminal("status")
    audit = terminal("audit")
    assert "mallory\\n\\x1b[32mops" in audit
    assert len(audit.splitlines()) == 3  # headers, rule, one row


# --- errors are one line: a wrong -A, a missing store, an unexpected failure --------------


def safebeat(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m safebeat ARGS` run as a user would, in `cwd`, without SAFEBEAT_URL."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SAFEBEAT_")}
    environ.pop("PYTHONPATH", None)
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-m", "safebeat", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )


def one_error_line(result: subprocess.CompletedProcess[str] | Result) -> str:
    """The command's only line of output, an error; fails if there is more (a traceback)."""
    text = result.stderr if isinstance(result, subprocess.CompletedProcess) else result.output
    lines = text.splitlines()
    assert len(lines) == 1, text
    assert lines[0].startswith("Error: ")
    return lines[0]


def test_a_missing_app_module_is_one_line_naming_it_and_the_folder(tmp_path: Path) -> None:
    """`-A nosuchmod` exits 2 with one line naming the module and the current directory."""
    result = safebeat("-A", "nosuchmod", "status", cwd=tmp_path)
    assert result.returncode == 2
    line = one_error_line(result)
    assert "no module named 'nosuchmod'" in line
    assert str(tmp_path) in line


def test_a_missing_app_attribute_is_one_line_naming_it(tmp_path: Path) -> None:
    """`-A proj.celery:nosuchapp` exits 2 with one line naming the module and the attribute."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "__init__.py").write_text("")
    (tmp_path / "proj" / "celery.py").write_text(
        "from celery import Celery\napp = Celery('proj', broker='memory://')\n"
    )
    result = safebeat("-A", "proj.celery:nosuchapp", "status", cwd=tmp_path)
    assert result.returncode == 2
    line = one_error_line(result)
    assert "module 'proj.celery' has no attribute 'nosuchapp'" in line


def test_an_app_run_from_the_wrong_folder_is_one_line_naming_that_folder(tmp_path: Path) -> None:
    """`-A proj` from a folder that does not hold proj exits 2 naming the folder."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "__init__.py").write_text(
        "from celery import Celery\napp = Celery('proj', broker='memory://')\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = safebeat("-A", "proj", "status", cwd=elsewhere)
    assert result.returncode == 2
    line = one_error_line(result)
    assert "no module named 'proj'" in line
    assert f"({elsewhere})" in line
    found = safebeat("-A", "proj", "--url", "sqlite:///s.sqlite3", "migrate", cwd=tmp_path)
    assert found.returncode == 0, found.stderr


def test_an_app_that_fails_to_import_is_one_line_and_traceback_shows_where(
    tmp_path: Path,
) -> None:
    """An app whose import raises exits 1 with one line; --traceback or SAFEBEAT_DEBUG=1
    shows the traceback instead."""
    (tmp_path / "broken.py").write_text("raise RuntimeError('settings are wrong')\n")
    result = safebeat("-A", "broken", "status", cwd=tmp_path)
    assert result.returncode == 1
    assert "RuntimeError: settings are wrong" in one_error_line(result)
    for shown in (
        safebeat("--traceback", "-A", "broken", "status", cwd=tmp_path),
        safebeat("-A", "broken", "status", cwd=tmp_path, SAFEBEAT_DEBUG="1"),
    ):
        assert shown.returncode == 1
        assert "Traceback (most recent call last)" in shown.stderr
        assert "broken.py" in shown.stderr


def test_an_unexpected_error_is_one_line_unless_traceback_is_asked(
    filled: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure safebeat did not foresee is one line naming its type, exit 1; with
    --traceback the exception itself propagates."""

    def fail(*args: object, **kwargs: object) -> None:
        raise ValueError("something nobody foresaw")

    monkeypatch.setattr("safebeat.cli.status.entry_statuses", fail)
    result = cli("--url", filled, "--namespace", namespace, "status")
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "unexpected ValueError: something nobody foresaw" in line
    assert "--traceback" in line
    traced = cli("--traceback", "--url", filled, "--namespace", namespace, "status")
    assert isinstance(traced.exception, ValueError)


def test_without_a_store_configured_the_cli_says_so_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No -A, --url or SAFEBEAT_URL: every reading command says so, exit 1, no file made."""
    monkeypatch.delenv("SAFEBEAT_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    for command in (["status"], ["history", "a"], ["health"], ["doctor"], ["migrate"]):
        result = cli(*command)
        assert result.exit_code == 1, command
        line = one_error_line(result)
        assert line == "Error: no store configured: give -A, --url or SAFEBEAT_URL"
    assert list(tmp_path.iterdir()) == []


def test_reading_commands_never_create_a_store_or_its_schema(
    tmp_path: Path, namespace: str
) -> None:
    """status, history, health, doctor, pause and prune on a missing SQLite file report it
    and leave no file; on an empty file they create no table."""
    url = f"sqlite:///{tmp_path}/missing.sqlite3"
    for command in (["status"], ["history", "a"], ["health"], ["pause", "a"], ["prune"]):
        result = cli("--url", url, "--namespace", namespace, *command)
        assert result.exit_code == 1, command
        assert "no SQLite store at" in one_error_line(result)
    doctor = cli("--url", url, "--namespace", namespace, "doctor")
    assert doctor.exit_code == 1
    assert "problem  store: no SQLite store at" in doctor.output
    assert list(tmp_path.iterdir()) == []

    empty = tmp_path / "empty.sqlite3"
    empty.touch()
    result = cli("--url", f"sqlite:///{empty}", "--namespace", namespace, "status")
    assert result.exit_code == 1
    with sqlite3.connect(empty) as conn:
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == []


# --- namespaces ------------------------------------------------------------------------


def test_without_a_namespace_the_store_s_only_one_is_used_and_named(
    sqlite_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one namespace in the store and none given, status uses it and says so on stderr."""
    monkeypatch.delenv("SAFEBEAT_NAMESPACE", raising=False)
    registered(sqlite_url, namespace)
    result = CliRunner().invoke(main, ["--url", sqlite_url, "status", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["namespace"] == namespace
    assert f"using namespace {namespace!r}, the only one" in result.stderr


def test_with_several_namespaces_the_cli_lists_them_and_asks_for_one(
    sqlite_url: str, namespace: str
) -> None:
    """Two namespaces and none given: one line listing both, exit 1; an empty namespace
    given says which namespaces exist, in status and in doctor."""
    store = registered(sqlite_url, namespace)
    store.register(f"{namespace}-2", [Definition("other", "every 60s", "d")], REPLICA)
    several = cli("--url", sqlite_url, "status")
    assert several.exit_code == 1
    line = one_error_line(several)
    assert f"holds namespaces {namespace!r}, {namespace + '-2'!r}" in line
    assert "--namespace" in line
    empty = cli("--url", sqlite_url, "--namespace", "default", "status")
    assert empty.exit_code == 1
    assert "namespace 'default' has no registered entries" in one_error_line(empty)
    assert repr(namespace) in empty.output
    doctor = cli("--url", sqlite_url, "--namespace", "default", "doctor")
    assert doctor.exit_code == 1
    assert "problem  namespace: namespace 'default' has no registered entries" in doctor.output
    assert repr(namespace) in doctor.output
    chosen = cli("--url", sqlite_url, "status", "--namespace", f"{namespace}-2", "--json")
    assert chosen.exit_code == 0, chosen.output
    assert [e["entry"] for e in json.loads(chosen.output)["entries"]] == ["other"]


# --- replicas: live, dead, gone ----------------------------------------------------------


def test_status_marks_replicas_live_or_dead_by_their_heartbeat_age(
    sqlite_url: str, namespace: str
) -> None:
    """A replica that missed three heartbeats is dead, a fresh one live (safebeat.liveness)."""
    registered(sqlite_url, namespace)
    now = datetime.now(timezone.utc)
    for replica, at in ((REPLICA, now - LIVE_WITHIN - timedelta(seconds=5)), (OTHER, now)):
        SqliteStore(sqlite_url, clock=lambda at=at: at).heartbeat(namespace, replica, "1", {})
    result = cli("--url", sqlite_url, "--namespace", namespace, "status", "--json")
    assert result.exit_code == 0, result.output
    live = {r["replica"]: r["live"] for r in json.loads(result.output)["replicas"]}
    assert live == {REPLICA.id: False, OTHER.id: True}
    table = cli("--url", sqlite_url, "--namespace", namespace, "status").output
    [dead_line] = [line for line in table.splitlines() if line.startswith(REPLICA.id)]
    [live_line] = [line for line in table.splitlines() if line.startswith(OTHER.id)]
    assert dead_line.split()[1] == "dead"
    assert live_line.split()[1] == "live"


def test_a_replica_that_stopped_cleanly_is_dropped_at_once(
    running: Scheduler, sqlite_url: str, namespace: str
) -> None:
    """Scheduler.close (what SIGTERM does) removes the replica's heartbeat: status lists it
    no more, while its history stays."""
    before = cli("--url", sqlite_url, "--namespace", namespace, "status", "--json")
    assert [r["replica"] for r in json.loads(before.output)["replicas"]] == [running.replica.id]
    running.close()
    after = cli("--url", sqlite_url, "--namespace", namespace, "status", "--json")
    report = json.loads(after.output)
    assert report["replicas"] == []
    assert report["entries"][0]["sent_by"] == running.replica.id


# --- options after the command, store errors in one line ---------------------------------


def test_url_and_namespace_are_accepted_after_the_command(filled: str, namespace: str) -> None:
    """`safebeat status --url URL --namespace NAME` works as the options before it do."""
    result = cli("status", "--url", filled, "--namespace", namespace, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["namespace"] == namespace
    history = cli("history", "every-1s", "--namespace", namespace, "--url", filled)
    assert history.exit_code == 0, history.output


def test_a_redis_wanting_a_password_the_url_lacks_says_so(namespace: str) -> None:
    """Against a server with requirepass, a URL without a password gets a clear line, not
    Redis's "HELLO must be called ..."."""
    server = services.start_redis_server(None, "--requirepass", "s3cret-pw")
    try:
        result = cli("--url", server.url, "--namespace", namespace, "status")
        wrong = cli(
            "--url", server.url.replace("redis://", "redis://:not-it@"), "--namespace",
            namespace, "status",
        )  # fmt: skip
    finally:
        server.stop()
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "the server requires a password and the URL gives none" in line
    assert "HELLO" not in line
    assert wrong.exit_code == 1
    assert "check the user name and password" in one_error_line(wrong)
    assert "not-it" not in wrong.output


def test_connection_refused_is_one_line() -> None:
    """An unreachable PostgreSQL (libpq's two-line message) is reported on one line."""
    url = f"postgresql://app:hunter2@127.0.0.1:{services.free_port()}/app"
    result = cli("--url", url, "--namespace", "x", "status")
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "Connection refused" in line
    assert "hunter2" not in line


def test_trigger_without_an_app_is_one_line_exit_2(sqlite_url: str, namespace: str) -> None:
    """`trigger` and `backfill` without -A say in one line that they need the app."""
    registered(sqlite_url, namespace)
    for command in (["trigger", "report"], ["backfill", "report", "--from", "2026-01-01T00:00Z",
                                            "--to", "2026-01-02T00:00Z"]):  # fmt: skip
        result = cli("--url", sqlite_url, "--namespace", namespace, *command)
        assert result.exit_code == 2
        assert "needs the Celery app: give it with -A" in one_error_line(result)


# --- django-celery-beat rows: the schedule beat runs -------------------------------------


#: How a rows app names its beat's scheduler: by name, not at all (beat's `-S` gives it;
#: the Django project has django_celery_beat installed), or as a subclass of its own.
ROWS_SCHEDULERS = {
    "named": "beat_scheduler='safebeat.contrib.django:DatabaseScheduler',",
    "default": "",
    "subclass": "beat_scheduler=__name__ + ':Custom',",
}


@pytest.fixture(params=sorted(ROWS_SCHEDULERS))
def rows_app(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sqlite_url: str,
    namespace: str,
) -> Iterator[str]:
    """A Celery app (`-A <name>`) whose beat runs django-celery-beat rows, one good, one bad."""
    from tests import djangosite

    alias = djangosite.alias_for(request, "sqlite")
    djangosite.migrate(alias, "django_celery_beat")
    monkeypatch.setattr(djangosite.BeatRouter, "alias", alias)
    name = f"clirows_{namespace.replace('-', '_')}"
    scheduler = ROWS_SCHEDULERS[request.param]
    (tmp_path / f"{name}.py").write_text(
        "from celery import Celery\n"
        "from safebeat.contrib.django.scheduler import DatabaseScheduler\n"
        "class Custom(DatabaseScheduler):\n"
        "    pass\n"
        f"app = Celery({namespace!r}, broker='memory://', set_as_current=False)\n"
        f"app.conf.update(result_expires=None, safebeat_url={sqlite_url!r}, {scheduler}\n"
        "    beat_schedule={'charge': {'task': 'billing.charge'}})\n"  # broken, and shadowed
        "@app.task(name='billing.charge', shared=False)\n"
        "def charge():\n"
        "    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    every, _ = IntervalSchedule.objects.get_or_create(every=60, period="seconds")
    try:
        PeriodicTask.objects.create(name="charge", task="billing.charge", interval=every)
        PeriodicTask.objects.create(
            name="bad-json", task="billing.charge", interval=every, args="[1"
        )
        yield name
    finally:
        PeriodicTask.objects.all().delete()


@pytest.fixture
def unmigrated_rows(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Django configured with django_celery_beat installed, its rows in a database where
    django_celery_beat was never migrated."""
    from tests import djangosite

    request.getfixturevalue("django_aliases")
    monkeypatch.setattr(djangosite.BeatRouter, "alias", "unmigrated")


def settings_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str, namespace: str, *lines: str
) -> str:
    """An app module (`-A <name>`) with one good `beat_schedule` entry `report`, plus `lines`."""
    name = f"clisettings_{namespace.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        "from celery import Celery\n"
        f"app = Celery({namespace!r}, broker='memory://', set_as_current=False)\n"
        f"app.conf.update(result_expires=None, safebeat_url={sqlite_url!r},\n"
        "    beat_schedule={'report': {'task': 'ops.report', 'schedule': 60.0}})\n"
        + "".join(f"{line}\n" for line in lines)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.mark.django
@pytest.mark.usefixtures("unmigrated_rows")
def test_unmigrated_periodic_tasks_are_one_line_naming_both_fixes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str, namespace: str
) -> None:
    """An app leaving beat_scheduler at Celery's default, in a Django project whose
    django_celery_beat tables are missing, gets one line: migrate them, or name beat's
    scheduler."""
    app = settings_app(tmp_path, monkeypatch, sqlite_url, namespace)
    registered(sqlite_url, namespace)
    result = cli("-A", app, "status")
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "cannot read django-celery-beat's periodic tasks" in line
    assert "django_celery_beat installed and beat_scheduler is Celery's default" in line
    assert "python manage.py migrate django_celery_beat" in line
    assert "set beat_scheduler (CELERY_BEAT_SCHEDULER in Django settings)" in line


@pytest.mark.django
@pytest.mark.usefixtures("unmigrated_rows")
def test_a_beat_scheduler_naming_another_scheduler_reads_no_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str, namespace: str
) -> None:
    """beat_scheduler naming safebeat.Scheduler keeps periodic task rows out of the CLI's
    schedule, even in a Django project with django_celery_beat installed."""
    app = settings_app(
        tmp_path,
        monkeypatch,
        sqlite_url,
        namespace,
        "app.conf.beat_scheduler = 'safebeat.Scheduler'",
    )
    registered(sqlite_url, namespace)
    result = cli("-A", app, "status", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert [entry["entry"] for entry in report["entries"]] == ["report"]
    assert report["broken"] == []


@pytest.mark.django
def test_django_celery_beat_rows_are_read_as_beat_reads_them(
    rows_app: str, sqlite_url: str, namespace: str
) -> None:
    """With DatabaseScheduler, status shows a row's next window and the bad row (a row wins
    over a setting of its name), doctor reports the bad row, and trigger accepts the row."""
    store = SqliteStore(sqlite_url)
    store.migrate()
    store.register(namespace, [Definition("charge", "every 60s", "d")], REPLICA)
    result = cli("-A", rows_app, "status", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    [entry] = report["entries"]
    assert entry["entry"] == "charge"
    assert entry["next_window"] is not None
    [broken] = report["broken"]
    assert broken["entry"] == "bad-json"
    assert "args is not valid JSON" in broken["problem"]
    table = cli("-A", rows_app, "status")
    assert "bad-json: " in table.output

    doctor = cli("-A", rows_app, "doctor")
    assert "problem  entries: schedule entry 'bad-json'" in doctor.output

    triggered = cli("-A", rows_app, "trigger", "charge")
    assert triggered.exit_code == 0, triggered.output
    assert "sent (task id" in triggered.output
    [row] = store.history(namespace, "charge")
    assert (row.status, row.reason) == (Status.SENT, "trigger")
    bad = cli("-A", rows_app, "trigger", "bad-json")
    assert bad.exit_code == 1
    assert "args is not valid JSON" in one_error_line(bad)


def replicas_listed(url: str, namespace: str) -> list[str]:
    result = cli("--url", url, "--namespace", namespace, "status", "--json")
    return [] if result.exit_code else [r["replica"] for r in json.loads(result.output)["replicas"]]


def test_a_celery_beat_stopped_by_sigterm_leaves_status_at_once(
    tmp_path: Path, redis_url: str, namespace: str
) -> None:
    """Two real `celery beat` processes: after SIGTERM to one, status lists only the other."""
    url = f"sqlite:///{tmp_path}/safebeat.sqlite3"
    beats = Cluster(
        workdir=tmp_path,
        broker_url=redis_url,
        queue=f"cli-{namespace}",
        schedule={"every-1s": 1.0},
        env={"SAFEBEAT_URL": url, "SAFEBEAT_NAMESPACE": namespace},
    )
    try:
        beats.start(2)
        beats.wait_started()
        deadline = time.monotonic() + 30
        while len(replicas_listed(url, namespace)) < 2:  # both heartbeated: a state, not a time
            assert time.monotonic() < deadline, beats.logs()
            time.sleep(0.2)
        stopped, kept = beats.processes
        beats.signal(0, signal.SIGTERM)
        assert stopped.wait(20) == 0, beats.logs()
        [left] = replicas_listed(url, namespace)
        assert left.split(":")[1] == str(kept.pid)
    finally:
        beats.stop()
        redis.Redis.from_url(redis_url).delete(f"cli-{namespace}")
