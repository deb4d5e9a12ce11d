"""`safebeat exec` as cron and Kubernetes start it: real processes, real stores."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from safebeat.cli import main
from safebeat.identity import format_window
from safebeat.stores import open_store
from safebeat.stores.protocols import Outcome, Status
from tests import services

#: A schedule whose latest slot (New Year, midnight UTC) stays put for the whole test,
#: with a grace wide enough to reach it: every start computes the same window.
YEARLY = ["--schedule", "0 0 1 1 *", "--grace", "400d"]
#: Appends "<window> <pid>" to the file named by $MARKER, one write per run.
RECORD = (
    "import os; "
    "line = f\"{os.environ['SAFEBEAT_WINDOW']} {os.getpid()}\\n\"; "
    "os.write(os.open(os.environ['MARKER'], os.O_WRONLY | os.O_APPEND | os.O_CREAT), "
    "line.encode()); "
    "import time; time.sleep(0.3)"
)


def exec_args(url: str, namespace: str, entry: str, *options: str) -> list[str]:
    return [sys.executable, "-m", "safebeat", "--url", url, "--namespace", namespace, "exec",
            "--entry", entry, *options]  # fmt: skip


def start(args: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        args,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=60)
    return process.returncode, stderr


def runs(marker: Path) -> list[str]:
    return marker.read_text().splitlines() if marker.exists() else []


@pytest.fixture(params=["postgres", "sqlite"])
def store_url(request: pytest.FixtureRequest) -> str:
    """A real store of each kind `exec` is meant for: PostgreSQL (many hosts), SQLite (one)."""
    name = "pg_url" if request.param == "postgres" else "sqlite_url"
    return str(request.getfixturevalue(name))


def test_of_three_simultaneous_starts_one_runs_the_command(
    store_url: str, namespace: str, tmp_path: Path
) -> None:
    """Three hosts' cron lines firing at once: one runs the command, two exit 0 saying who has it,
    and the dispatch row records the run."""
    marker = tmp_path / "runs"
    args = exec_args(store_url, namespace, "charge-daily", *YEARLY, "--", sys.executable,
                     "-c", RECORD)  # fmt: skip
    processes = [start(args, {"MARKER": str(marker)}) for _ in range(3)]
    results = [finish(p) for p in processes]

    assert [code for code, _ in results] == [0, 0, 0], results
    [line] = runs(marker)
    window, _pid = line.split()
    held = [err for _, err in results if "already claimed by" in err]
    assert len(held) == 2, results
    store = open_store(store_url)
    [row] = store.history(namespace, "charge-daily")
    store.close()
    assert format_window(row.window) == window
    assert row.status is Status.SENT
    assert row.reason == "exec"
    assert row.outcome is Outcome.SUCCESS
    assert row.worker is not None
    assert row.worker.endswith(f":{_pid}")
    assert row.runtime is not None
    assert row.runtime >= timedelta(seconds=0.3)


@pytest.mark.parametrize("given", ["annotation", "job name"])
def test_pods_of_one_cronjob_run_its_scheduled_window_once(
    pg_url: str, namespace: str, tmp_path: Path, given: str
) -> None:
    """A CronJob started twice (and a third time for good measure): the scheduled time from
    the annotation (in the CronJob's zone) or from the Job's name is the window, run once."""
    now = datetime.now(timezone.utc)
    scheduled = now.replace(second=0, microsecond=0)
    if given == "annotation":
        moscow = scheduled.astimezone(timezone(timedelta(hours=3)))
        env = {"SAFEBEAT_SCHEDULED_TIME": moscow.isoformat()}  # 2026-...T03:04:00+03:00
    else:
        env = {"SAFEBEAT_JOB_NAME": f"charge-every-minute-{int(scheduled.timestamp()) // 60}"}
    marker = tmp_path / "runs"
    args = exec_args(pg_url, namespace, "charge", "--schedule", "* * * * *", "--tz",
                     "Europe/Moscow", "--", sys.executable, "-c", RECORD)  # fmt: skip
    processes = [start(args, {**env, "MARKER": str(marker)}) for _ in range(3)]
    results = [finish(p) for p in processes]

    assert [code for code, _ in results] == [0, 0, 0], results
    [line] = runs(marker)
    assert line.split()[0] == format_window(scheduled)
    assert sum("claimed; running" in err for _, err in results) == 1


def test_the_commands_exit_status_is_returned_and_recorded(sqlite_url: str, namespace: str) -> None:
    """A command exiting 3 makes exec exit 3; the row records a failure with the exit status."""
    args = exec_args(sqlite_url, namespace, "fails", *YEARLY, "--", sys.executable, "-c",
                     "raise SystemExit(3)")  # fmt: skip
    code, stderr = finish(start(args, {}))
    assert code == 3, stderr
    assert "the command exited with 3" in stderr
    store = open_store(sqlite_url)
    [row] = store.history(namespace, "fails")
    store.close()
    assert row.outcome is Outcome.FAILURE
    assert row.finished_at is not None
    assert row.error == "the command exited with 3"


def test_sigterm_is_passed_on_to_the_command(
    sqlite_url: str, namespace: str, tmp_path: Path
) -> None:
    """Kubernetes stopping the pod (SIGTERM to exec) reaches the command, whose status exec
    returns, and the run is recorded as failed."""
    ready = tmp_path / "ready"
    child = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(42))\n"
        f"open({str(ready)!r}, 'w').close()\n"
        "time.sleep(60)\n"
    )
    process = start(exec_args(sqlite_url, namespace, "long", *YEARLY, "--", sys.executable,
                              "-c", child), {})  # fmt: skip
    deadline = time.monotonic() + 30
    while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), finish(process)
    process.send_signal(signal.SIGTERM)
    code, stderr = finish(process)
    assert code == 42, stderr
    store = open_store(sqlite_url)
    [row] = store.history(namespace, "long")
    store.close()
    assert row.outcome is Outcome.FAILURE


def test_an_unreachable_store_runs_nothing_unless_told_to_fail_open(
    namespace: str, tmp_path: Path
) -> None:
    """With the store down, exec exits 125 without running the command (fail closed), the
    password hidden; with --fail-open it runs the command, untracked, and says so."""
    url = f"postgresql://app:hunter2@127.0.0.1:{services.free_port()}/app"
    marker = tmp_path / "runs"
    env = {"MARKER": str(marker)}
    closed = exec_args(url, namespace, "charge", *YEARLY, "--", sys.executable, "-c", RECORD)
    code, stderr = finish(start(closed, env))
    assert code == 125
    assert "the command was not run (fail closed" in stderr
    assert "hunter2" not in stderr
    assert runs(marker) == []

    opened = exec_args(url, namespace, "charge", *YEARLY, "--fail-open", "--", sys.executable,
                       "-c", RECORD)  # fmt: skip
    code, stderr = finish(start(opened, env))
    assert code == 0, stderr
    assert "running the command anyway, untracked (--fail-open" in stderr
    assert len(runs(marker)) == 1


def test_a_command_that_cannot_be_found_claims_nothing(sqlite_url: str, namespace: str) -> None:
    """A missing program exits 127 before anything is claimed, so a host that has it can run."""
    args = exec_args(sqlite_url, namespace, "charge", *YEARLY, "--", "no-such-program-here")
    code, stderr = finish(start(args, {}))
    assert code == 127
    assert "command not found: 'no-such-program-here'; nothing was claimed" in stderr
    store = open_store(sqlite_url)
    store.migrate()  # exec never even created the tables
    assert store.history(namespace) == []
    store.close()


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--schedule", "0 25 * * *"], "hour field '25'"),
        (["--schedule", "0 3 * * *", "--tz", "Mars/Base"], "unknown time zone 'Mars/Base'"),
        (["--schedule", "0 3 * * *", "--grace", "soon"], "--grace='soon'"),
    ],
)
def test_bad_input_is_a_usage_error_naming_it(
    sqlite_url: str, options: list[str], says: str
) -> None:
    """A bad schedule, zone or grace exits 2 with a message naming the culprit, running nothing."""
    result = CliRunner().invoke(
        main, ["--url", sqlite_url, "exec", "--entry", "e", *options, "--", "true"]
    )
    assert result.exit_code == 2
    assert says in result.output
    assert "Traceback" not in result.output
