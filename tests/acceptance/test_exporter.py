"""A real `safebeat exporter` beside real beats: what it serves comes from the store, so a
restart of every process loses nothing an alert reads."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests import runscope, services
from tests.acceptance.harness import ROOT, Cluster
from tests.acceptance.test_metrics import scrape, scrape_until
from tests.proxy import Proxy
from tests.unit.test_monitoring import documented_metrics

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]

WEEK = 7 * 24 * 3600.0
SCHEDULE = {"weekly-report": WEEK, "every-1s": 1.0}


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = runscope.unique("exporter")
    yield name
    redis.Redis.from_url(redis_url).delete(name)


def start_exporter(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    """`safebeat exporter` on `port` for the acceptance app, answering once it serves."""
    command = [sys.executable, "-m", "safebeat", "-A", "tests.acceptance.beatapp", "exporter"]
    command += ["--port", str(port), "--address", "127.0.0.1", "--interval", "1s"]
    with log.open("ab") as out:
        process = subprocess.Popen(
            command,
            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
            cwd=log.parent,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, log.read_text()
        try:
            scrape(port)
            return process
        except (urllib.error.URLError, ConnectionError):
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)


def stopped(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(10)


def next_due(samples: dict[str, list[tuple[dict[str, str], float]]], entry: str) -> list[float]:
    return [
        value
        for labels, value in samples.get("safebeat_entry_next_due_timestamp_seconds", [])
        if labels["entry"] == entry
    ]


def test_every_beat_and_the_exporter_restarted_the_weekly_entry_is_served_at_once(
    tmp_path: Path, redis_url: str, queue: str, namespace: str
) -> None:
    """Stop every beat and the exporter, start them again: the first scrape of the new
    exporter already has the weekly entry's next due window (the same instant) and the
    namespace's overdue total, with no window of it published meanwhile."""
    env = {
        "SAFEBEAT_URL": f"sqlite:///{tmp_path}/safebeat.sqlite3",
        "SAFEBEAT_NAMESPACE": namespace,
        "SB_BROKER_URL": redis_url,
        "SB_QUEUE": queue,
        "SB_SCHEDULE": json.dumps(SCHEDULE),
    }
    port = services.free_port()
    beats = Cluster(workdir=tmp_path, broker_url=redis_url, queue=queue, schedule=SCHEDULE, env=env)
    beats.start(2)
    exporter = None
    try:
        beats.wait_started()
        exporter = start_exporter(env, port, tmp_path / "exporter.log")
        before = scrape_until(port, lambda found: bool(next_due(found, "weekly-report")))
        [due] = next_due(before, "weekly-report")
        assert due > time.time() + WEEK - 3600

        stopped(exporter)
        beats.stop()
        beats.processes.clear()
        beats.start(2)
        exporter = start_exporter(env, port, tmp_path / "exporter.log")
        after = scrape(port)  # the first scrape: no wait for a tick or a publish
    finally:
        if exporter is not None:
            stopped(exporter)
        beats.stop()

    assert next_due(after, "weekly-report") == [due]
    [(labels, overdue)] = after["safebeat_schedule_overdue_entries"]
    assert (labels, overdue) == ({"safebeat_namespace": namespace}, 0)
    served = {n for n in after if n.startswith("safebeat_")} - {
        "safebeat_schedule_oldest_live_run_timestamp_seconds",  # no worker runs here
        "safebeat_entry_paused_until_timestamp_seconds",  # nothing is paused
        "safebeat_entry_last_success_timestamp_seconds",
        "safebeat_entry_last_failure_timestamp_seconds",
    }
    documented = set(documented_metrics("From the exporter"))
    assert served <= documented, served - documented


def failed_readings(samples: dict[str, list[tuple[dict[str, str], float]]]) -> float:
    return sum(value for _, value in samples.get("safebeat_schedule_read_errors_total", []))


def store_up(samples: dict[str, list[tuple[dict[str, str], float]]]) -> list[float]:
    return [value for _, value in samples.get("safebeat_exporter_store_up", [])]


def test_an_exporter_that_cannot_read_the_store_says_so_and_serves_no_stale_reading(
    tmp_path: Path, redis_url: str, namespace: str
) -> None:
    """Started against a closed port, the exporter serves safebeat_exporter_store_up 0 and
    no overdue total (not a reassuring 0). Through a proxy to a real Redis: once read, it
    serves the totals; when the proxy refuses connections, store_up turns 0 and the
    totals are withdrawn, the last good reading's time stays; restored, they come back."""
    env = {
        "SAFEBEAT_NAMESPACE": namespace,
        "SB_BROKER_URL": redis_url,
        "SB_QUEUE": runscope.unique("exporter"),
        "SB_SCHEDULE": json.dumps({"every-1s": 1.0}),
    }
    closed = services.free_port()  # nothing listens there
    port = services.free_port()
    log = tmp_path / "exporter.log"
    exporter = start_exporter({**env, "SAFEBEAT_URL": f"redis://127.0.0.1:{closed}/0"}, port, log)
    try:
        first = scrape_until(port, lambda found: failed_readings(found) > 0)
    finally:
        stopped(exporter)
    assert store_up(first) == [0.0]
    assert "safebeat_schedule_overdue_entries" not in first
    assert "safebeat_schedule_read_timestamp_seconds" not in first
    assert "cannot read the store (safebeat_exporter_store_up 0" in log.read_text()

    parsed = urllib.parse.urlsplit(redis_url)
    proxy = Proxy(parsed.hostname or "127.0.0.1", parsed.port or 6379)
    through = urllib.parse.urlunsplit(parsed._replace(netloc=f"127.0.0.1:{proxy.port}"))
    exporter = start_exporter({**env, "SAFEBEAT_URL": through}, port, log)
    try:
        read = scrape_until(port, lambda found: store_up(found) == [1.0])
        assert [v for _, v in read["safebeat_schedule_overdue_entries"]] == [0.0]
        [(_, last_read)] = read["safebeat_schedule_read_timestamp_seconds"]
        proxy.cut()
        down = scrape_until(port, lambda found: store_up(found) == [0.0])
        proxy.restore()
        back = scrape_until(port, lambda found: store_up(found) == [1.0])
    finally:
        stopped(exporter)
        proxy.close()
    assert "safebeat_schedule_overdue_entries" not in down
    assert "safebeat_entry_next_due_timestamp_seconds" not in down
    [(_, kept)] = down["safebeat_schedule_read_timestamp_seconds"]
    assert kept >= last_read
    assert [v for _, v in back["safebeat_schedule_overdue_entries"]] == [0.0]


def test_an_exporter_whose_port_is_taken_exits_naming_it(
    tmp_path: Path, redis_url: str, namespace: str
) -> None:
    """The exporter is only a server: on a port another process holds it exits 1 with one
    line naming the port and the option, not a traceback."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        command = [sys.executable, "-m", "safebeat", "-A", "tests.acceptance.beatapp", "exporter"]
        command += ["--port", str(port), "--address", "127.0.0.1"]
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "SAFEBEAT_URL": redis_url,
            "SAFEBEAT_NAMESPACE": namespace,
            "SB_BROKER_URL": redis_url,
            "SB_QUEUE": runscope.unique("exporter"),
            "SB_SCHEDULE": json.dumps({"every-1s": 1.0}),
        }
        result = subprocess.run(
            command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
        )
    assert result.returncode == 1, result.stderr
    assert f"cannot serve on port {port}" in result.stderr
    assert "give --port a free port" in result.stderr
    assert "Traceback" not in result.stderr
