"""docs/quickstart.md, run as written: three beat replicas and a worker, every window once.

The page's files and commands are read from the Markdown (`tests/docpages.py`), so a
change to the page changes what runs here, and a page that no longer works fails.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests import services
from tests.acceptance.docrun import (
    DOCS,
    Reader,
    assert_shows,
    make_virtualenv,
    only_command,
    tail,
    wait_for,
)
from tests.docpages import Page

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.xdist_group("docs"),
]

PAGE = Page(DOCS / "quickstart.md")

#: The localhost services the page names; the test runs them on its own servers instead.
BROKER = "redis://localhost:6379/0"
STORE = "postgresql://postgres:postgres@localhost:5432/postgres"

REPLICAS = 3
WINDOWS = 3  # windows of sync-prices to see before the checks

_SENT = re.compile(r"Sending due task (?P<entry>\S+) \(\S+\) for window (?P<window>\S+)")
_SYNCED = re.compile(r"syncing prices for window (?P<window>.+)$", re.MULTILINE)
_REPORTED = re.compile(r"send_weekly_report\[\S+\] succeeded")
_REPLICA = re.compile(r"replica (?P<replica>[\w.-]+:\d+:[0-9a-f]{6})")


@pytest.fixture(scope="session")
def quickstart_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv made by the page's install-from-checkout command, once per test session.

    A real `python -m venv` and `pip install` (not this test run's packages), so a
    dependency the install line forgets fails here: 30 to 45 s with a warm pip cache.
    """
    return make_virtualenv(
        tmp_path_factory.mktemp("quickstart") / "venv", PAGE, "install-from-checkout"
    )


@pytest.fixture
def store_url(pg_admin_url: str, testrun_uid: str) -> Iterator[str]:
    """A database of the test's own, in place of the page's `postgres` database."""
    name = f"safebeat_docs_quickstart_{testrun_uid[:8]}"
    yield services.create_database(pg_admin_url, name)
    services.drop_database(pg_admin_url, name)


@pytest.fixture
def broker_url() -> Iterator[str]:
    """A redis-server of the test's own, so no other test's worker shares its queue."""
    server = services.start_redis_server()
    yield server.url
    server.stop()


def sent_windows(logs: list[str]) -> Counter[tuple[str, str]]:
    """(entry, window) of every "Sending due task" line of the beats' logs."""
    return Counter((m["entry"], m["window"]) for log in logs for m in _SENT.finditer(log))


def test_install_line_matches_the_checkout_line() -> None:
    """The published install line asks for the same extras as the from-checkout one."""
    published = PAGE.block("install").text
    checkout = PAGE.block("install-from-checkout").text
    assert checkout.replace("path/to/safebeat", "safebeat") == published


def test_quickstart_runs_as_written(
    tmp_path: Path, quickstart_venv: Path, store_url: str, broker_url: str
) -> None:
    """Following the page gives three beats and a worker that run every window once.

    The page's files go into a fresh folder, its commands run in a shell with the page's
    virtualenv active; only the broker and store URLs it names become the test's own. The
    output blocks of the page must match what the commands print (times, ids and URLs
    aside), and `safebeat status` must show the entries and the three replicas.
    """
    page_text = PAGE.path.read_text()
    for written in (BROKER, STORE):
        assert written in page_text, f"the quickstart no longer names {written}"
    reader = Reader(quickstart_venv, tmp_path, {BROKER: broker_url, STORE: store_url})
    reader.write_files(PAGE.files())
    assert {"proj/__init__.py", "proj/celery.py", "proj/tasks.py"} <= set(PAGE.files())

    beat_logs = [tmp_path / f"beat-{index}.log" for index in range(REPLICAS)]
    worker_log = tmp_path / "worker.log"
    every_log = [*beat_logs, worker_log]

    def logs() -> str:
        return tail(every_log)

    beats = [reader.start(only_command(PAGE.block("beat")), log) for log in beat_logs]
    worker = reader.start(only_command(PAGE.block("worker")), worker_log)
    try:
        wait_for(
            lambda: len(_SYNCED.findall(worker_log.read_text())) >= WINDOWS,
            f"the worker to run {WINDOWS} windows of sync-prices",
            timeout=90,
            alive=[*beats, worker],
            logs=logs,
        )
        status = reader.run(only_command(PAGE.block("status")))
        # As on the page: the replicas migrated the store when they started.
        migrated = reader.run(only_command(PAGE.block("migrate")))
        assert_shows(PAGE, "migrate-output", migrated, migrated)
        trigger = only_command(PAGE.block("trigger"))
        reader.run(trigger)
        reader.run(trigger)  # the same day again: every claim() of the task answers false
        wait_for(
            lambda: len(_REPORTED.findall(worker_log.read_text())) >= 2,
            "the worker to run both triggered weekly reports",
            timeout=30,
            alive=[*beats, worker],
            logs=logs,
        )
        reader.stop(*beats)
        sent = sent_windows([log.read_text() for log in beat_logs])
        wait_for(
            lambda: len(_SYNCED.findall(worker_log.read_text())) >= len(sent),
            "the worker to run every window the beats sent",
            timeout=30,
            alive=[worker],
            logs=logs,
        )
    finally:
        reader.stop()

    beat_output = [log.read_text() for log in beat_logs]
    worker_output = worker_log.read_text()
    assert_shows(PAGE, "banner", beat_output[0], logs())
    assert_shows(PAGE, "beat-log", "\n".join(beat_output), logs())
    assert_shows(PAGE, "worker-log", worker_output, logs())
    assert_shows(PAGE, "trigger-worker-log", worker_output, logs())

    # Every window once across the replicas, on the 10 s grid, and run once by the worker.
    assert set(sent.values()) == {1}, f"windows sent more than once: {sent}"
    windows = sorted(datetime.fromisoformat(w.replace("Z", "+00:00")) for _, w in sent)
    assert len(windows) >= WINDOWS, windows
    gaps = {later - earlier for earlier, later in itertools.pairwise(windows)}
    assert len(gaps) == 1, f"windows missing in {windows}"
    ran = Counter(datetime.fromisoformat(w) for w in _SYNCED.findall(worker_output))
    assert ran == Counter(windows), f"sent {windows}, the worker ran {ran}"
    assert worker_output.count("weekly report for acme") == 1, worker_output

    # `safebeat status`: the page's entries, and the three replicas that beat logged.
    shown = PAGE.block("status-output").text
    for entry in ("celery.backend_cleanup", "sync-prices", "weekly-report"):
        assert entry in shown, f"the page's status output lost {entry}"
        assert entry in status, status
    replicas = {m["replica"] for log in beat_output for m in _REPLICA.finditer(log)}
    assert len(replicas) == REPLICAS, replicas
    for replica in replicas:
        assert replica in status, f"{replica} is not in `safebeat status`:\n{status}"
