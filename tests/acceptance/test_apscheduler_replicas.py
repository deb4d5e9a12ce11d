"""Three app replicas, each running a real APScheduler BackgroundScheduler with an
every-second job and safebeat's executor, against real stores: each run time runs once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

from safebeat.identity import format_window, parse_window
from safebeat.stores import open_store
from safebeat.stores.protocols import Outcome, Status
from tests.acceptance.harness import ROOT

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]

#: Windows run after every replica was up before the replicas are stopped.
WINDOWS_WANTED = 4


class Replicas:
    """`tests.acceptance.apscheduler_replica` processes sharing one store and one runs file."""

    def __init__(self, tmp_path: Path, url: str, namespace: str, pool: str = "thread") -> None:
        self.runs = tmp_path / "runs"
        self.logs: list[Path] = []
        self.processes: list[subprocess.Popen[str]] = []
        self.args = [sys.executable, "-m", "tests.acceptance.apscheduler_replica", url,
                     namespace, str(self.runs), pool]  # fmt: skip
        self.tmp_path = tmp_path

    def start(self, count: int) -> datetime:
        """Start `count` replicas; return the instant all of them were running."""
        for index in range(count):
            log = self.tmp_path / f"replica-{index}.log"
            self.logs.append(log)
            self.processes.append(
                subprocess.Popen(
                    self.args,
                    cwd=ROOT,
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                    stdout=subprocess.PIPE,
                    stderr=log.open("w"),
                    text=True,
                )
            )
        for process in self.processes:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready", self.log_text()
        return datetime.now(timezone.utc)

    def executions(self) -> list[tuple[datetime, int]]:
        lines = self.runs.read_text().splitlines() if self.runs.exists() else []
        return [(parse_window(w), int(pid)) for w, pid in (line.split() for line in lines)]

    def wait_for_windows_after(self, since: datetime, count: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len({w for w, _ in self.executions() if w > since}) >= count:
                return
            time.sleep(0.1)
        raise AssertionError(f"fewer than {count} windows ran in {timeout}s:\n{self.log_text()}")

    def stop(self) -> None:
        for process in self.processes:
            process.send_signal(signal.SIGTERM)
        for process in self.processes:
            assert process.wait(30) == 0, self.log_text()

    def log_text(self) -> str:
        return "\n".join(log.read_text()[-2000:] for log in self.logs if log.exists())


@pytest.fixture(params=["postgres", "sqlite"])
def store_url(request: pytest.FixtureRequest) -> str:
    """PostgreSQL (replicas on many hosts) and SQLite (replicas on one host)."""
    name = "pg_url" if request.param == "postgres" else "sqlite_url"
    return str(request.getfixturevalue(name))


def test_three_replicas_run_each_run_time_once(
    store_url: str, namespace: str, tmp_path: Path
) -> None:
    """Every run time of the every-second job ran in exactly one of three replicas, the
    replicas really competed for them, and each run is on its dispatch row."""
    replicas = Replicas(tmp_path, store_url, namespace)
    try:
        all_up = replicas.start(3)
        replicas.wait_for_windows_after(all_up, WINDOWS_WANTED)
    finally:
        replicas.stop()

    executions = replicas.executions()
    counts = Counter(window for window, _ in executions)
    assert counts, replicas.log_text()
    assert max(counts.values()) == 1, [w for w, n in counts.items() if n > 1]
    assert all(window.microsecond == 0 for window in counts)
    assert "was claimed by another replica" in replicas.log_text()

    store = open_store(store_url)
    rows = {row.window: row for row in store.history(namespace, "every-second", limit=1000)}
    store.close()
    assert set(rows) == set(counts)
    assert {row.status for row in rows.values()} == {Status.SENT}
    assert {row.reason for row in rows.values()} == {"apscheduler"}
    assert {row.outcome for row in rows.values()} == {Outcome.SUCCESS}
    ran_in = dict(executions)
    assert all(row.worker == f"{row.host}:{ran_in[window]}" for window, row in rows.items())


def test_the_process_pool_executor_claims_in_the_pool_process(
    sqlite_url: str, namespace: str, tmp_path: Path
) -> None:
    """With ProcessPoolExecutor, jobs run in a pool process, see their window, and are recorded."""
    replicas = Replicas(tmp_path, sqlite_url, namespace, pool="process")
    try:
        all_up = replicas.start(1)
        replicas.wait_for_windows_after(all_up, 2)
    finally:
        replicas.stop()

    executions = replicas.executions()
    assert {pid for _, pid in executions} != {replicas.processes[0].pid}
    store = open_store(sqlite_url)
    rows = store.history(namespace, "every-second", limit=100)
    store.close()
    assert {format_window(r.window) for r in rows} == {format_window(w) for w, _ in executions}
    assert {r.outcome for r in rows} == {Outcome.SUCCESS}
