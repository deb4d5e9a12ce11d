"""`safebeat skip-next` under two real `celery beat` replicas, on PostgreSQL, Redis, SQLite.

While the replicas run an entry every 2 s, `safebeat -A ... skip-next` runs twice as a
real process: the entry's next window, then the next one free when the second process
starts, are recorded as skipped (reason `operator`) and audited. Counted on the broker:
those two windows never sent, every other window of the run sent once, the windows after
them too; the replicas log no error about them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from safebeat.records import AuditAction
from safebeat.stores import open_store
from safebeat.stores.protocols import Status
from tests import runscope
from tests.acceptance.harness import (
    ROOT,
    Cluster,
    redis_messages,
    safebeat_cluster,
    safebeat_messages,
    verify,
    wait_registered,
)
from tests.acceptance.test_runtime_entries import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]

SCHEDULE = {"every-2s": 2.0}
CLAIM_TIMEOUT = 2.0


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = runscope.unique("skipnext")
    yield name
    redis.Redis.from_url(redis_url).delete(name)


def _skip_next(beats: Cluster, note: str) -> str:
    """Run `safebeat -A <the beats' app> skip-next every-2s` as its own process."""
    environment = {
        **os.environ,
        "PYTHONPATH": beats.pythonpath,
        "SB_BROKER_URL": beats.broker_url,
        "SB_QUEUE": beats.queue,
        "SB_SCHEDULE": json.dumps(dict(beats.schedule)),
        **beats.env,
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "safebeat",
            "-A",
            beats.app,
            "skip-next",
            "every-2s",
            "--note",
            note,
        ],
        cwd=beats.workdir,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(params=["postgres", "redis", "sqlite"])
def store_url(request: pytest.FixtureRequest, pg_url: str, redis_url: str, tmp_path: Path) -> str:
    urls = {"postgres": pg_url, "redis": redis_url, "sqlite": f"sqlite:///{tmp_path}/sb.sqlite3"}
    return urls[request.param]


def test_skipped_windows_are_not_sent_and_the_later_ones_are(
    tmp_path: Path, store_url: str, redis_url: str, queue: str, namespace: str
) -> None:
    url = store_url
    store = open_store(url)
    beats = safebeat_cluster(
        tmp_path,
        broker_url=redis_url,
        queue=queue,
        schedule=SCHEDULE,
        store_url=url,
        namespace=namespace,
        claim_timeout=CLAIM_TIMEOUT,
    )
    assert beats.pythonpath == str(ROOT)
    beats.start(2)
    try:
        beats.wait_started()
        wait_registered(store, namespace, SCHEDULE)
        wait_until(store, store.clock() + timedelta(seconds=3))
        said = [_skip_next(beats, "holiday"), _skip_next(beats, "and the day after")]
        audited = store.audit(namespace, "every-2s")
        skipped = sorted(w for record in audited for w in record.windows)
        end = skipped[-1] + timedelta(seconds=10)
        wait_until(store, end)
    finally:
        beats.stop()
    messages = list(safebeat_messages(redis_messages(redis_url, queue)))
    logs = beats.logs(200)

    assert [r.action for r in audited] == [AuditAction.SKIP, AuditAction.SKIP]
    assert [r.note for r in audited] == ["and the day after", "holiday"]
    assert len(skipped) == 2, skipped
    assert skipped[1] > skipped[0], skipped  # the next window when the second one ran
    for text in said:
        assert "is recorded as skipped (reason operator)" in text, text

    verdict = verify(
        store, namespace, SCHEDULE, messages, complete_until=end - timedelta(seconds=3)
    )
    assert verdict.duplicates == {}, f"{verdict.duplicates}\n{logs}"
    assert verdict.off_grid == []
    assert verdict.missing == [("every-2s", w) for w in skipped], f"{verdict.missing}\n{logs}"
    sent = sorted(m.window for m in messages)
    after = [w for w in sent if w > skipped[-1]]
    assert len(after) >= 3, sent  # the windows after the skipped ones are sent as usual
    assert not set(skipped) & set(sent)

    rows = {r.window: r for r in store.history(namespace, "every-2s", limit=1000)}
    for window in skipped:
        row = rows[window]
        assert (row.status, row.reason, row.task_id) == (Status.SKIPPED, "operator", None)
    # each later window claimed with its task id (the newest may await its confirmation)
    assert all(rows[w].task_id is not None for w in after), logs
    assert all(rows[w].attempts == 1 for w in sent), "a window was re-published"
    assert "ERROR" not in logs, logs
    assert "Traceback" not in logs, logs
    store.close()
