"""A rolling upgrade from the last release to this checkout and back, counted on a broker.

The last release recorded in `releases.toml` is built from its commit into a virtualenv of
its own (this checkout is not importable there). Three real `celery beat -S
safebeat.Scheduler` replicas of it create the store's schema and run alone for a while.
Then, as a Kubernetes rolling update does with its default strategy (for three replicas:
one pod more, none fewer), a replica of the checkout starts and, once it is up, one old
replica gets SIGTERM, three times over; the new replicas run alone; then the same roll
goes back to the release (`kubectl rollout undo`: a downgrade, on the schema the checkout
migrated), which runs alone to the end. Every window of the run must reach the broker
exactly once, none missing, and no beat may log an error. docs/upgrading.md names this
test for "two adjacent releases run side by side".

While the checkout is the last release itself, both sides run the same code; the test
is real for the next release.
"""

from __future__ import annotations

import re
import signal
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from safebeat.stores.postgres import PostgresStore
from safebeat.stores.protocols import Store
from safebeat.stores.redis import RedisStore
from tests import releases, runscope, services
from tests.acceptance.harness import (
    Cluster,
    redis_messages,
    safebeat_cluster,
    safebeat_messages,
    verify,
    wait_registered,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]

SCHEDULE = {
    "every-1s": 1.0,
    "every-1s-b": 1.0,
    "every-1s-c": 1.0,
    "every-2s": 2.0,
    "every-2s-b": 2.0,
}
REPLICAS = 3
CLAIM_TIMEOUT = 2.0
#: Seconds one release runs alone (before, between and after the rolls), and between two
#: steps of a roll.
ALONE, BETWEEN_STEPS = 4.0, 2.0
ERROR_LINE = re.compile(r": (?:ERROR|CRITICAL)/|Traceback")


@pytest.fixture(scope="session")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a virtualenv running the last recorded release, built from its commit
    (once per test session; uv's cache makes it quick)."""
    release = releases.newest()
    releases.require_commit(release)
    folder = tmp_path_factory.mktemp(f"safebeat-{release.version}")
    source = releases.export(release.commit, folder / "source")
    requirements = (f"{source}[postgres,redis]", releases.REDIS_TRANSPORT)
    python = releases.virtualenv(folder / "venv", *requirements)
    releases.assert_runs_its_own_safebeat(python, folder, release.version)
    return python


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = runscope.unique("rolling")
    yield name
    redis.Redis.from_url(redis_url).delete(name)


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def store_url(request: pytest.FixtureRequest, worker_id: str) -> Iterator[str]:
    """The store the replicas share. PostgreSQL: an empty database of the test's own, so
    the previous release creates the schema and the checkout upgrades it."""
    if request.param == "redis":
        yield request.getfixturevalue("redis_url")
        return
    admin: str = request.getfixturevalue("pg_admin_url")
    name = runscope.database("rolling", worker_id)
    yield services.create_database(admin, name)
    services.drop_database(admin, name)


def roll(beats: Cluster, python: str) -> None:
    """Replace the running replicas one at a time by replicas on `python`: start one, and
    once it is up, SIGTERM one of the others and wait for it to exit."""
    running = [index for index, process in enumerate(beats.processes) if process.poll() is None]
    beats.python = python
    for old in running:
        beats.start(1)
        beats.wait_started()
        beats.signal(old, signal.SIGTERM)
        beats.processes[old].wait(30)
        time.sleep(BETWEEN_STEPS)


def error_lines(beats: Cluster) -> list[str]:
    return [
        f"{log.name}: {line}"
        for log in beats.logfiles
        for line in log.read_text(errors="replace").splitlines()
        if ERROR_LINE.search(line)
    ]


def test_replicas_rolled_from_the_last_release_and_back_send_each_window_once(  # noqa: PLR0917 - fixtures
    tmp_path: Path,
    previous_release: Path,
    store_url: str,
    redis_url: str,
    queue: str,
    namespace: str,
) -> None:
    """Three replicas of the last release replaced one at a time by the checkout's, then
    rolled back the same way (a downgrade), on PostgreSQL and on Redis: every window
    once, none missing, no error logged."""
    store: Store = (
        PostgresStore(store_url) if store_url.startswith("postgres") else RedisStore(store_url)
    )
    beats = safebeat_cluster(
        tmp_path,
        broker_url=redis_url,
        queue=queue,
        schedule=SCHEDULE,
        store_url=store_url,
        namespace=namespace,
        claim_timeout=CLAIM_TIMEOUT,
    )
    # Both releases load the same app module, from a folder holding nothing else.
    here = Path(__file__).parent
    beats.app, beats.python = "beatapp", str(previous_release)
    beats.pythonpath = str(releases.copy_modules(tmp_path / "app", here / "beatapp.py"))
    try:
        beats.start(REPLICAS)
        beats.wait_started()
        wait_registered(store, namespace, SCHEDULE)
        time.sleep(ALONE)
        upgrade = store.clock()
        roll(beats, sys.executable)  # this checkout, installed in the tests' virtualenv
        time.sleep(ALONE)
        downgrade = store.clock()
        roll(beats, str(previous_release))
        downgraded = store.clock()
        time.sleep(ALONE + CLAIM_TIMEOUT + 2)
    finally:
        beats.stop()
    end = store.clock()
    complete_until = end - timedelta(seconds=CLAIM_TIMEOUT + 2)
    verdict = verify(
        store, namespace, SCHEDULE, safebeat_messages(redis_messages(redis_url, queue)),
        complete_until=complete_until,
    )  # fmt: skip
    verdict.assert_exactly_once(beats.logs())
    # The windows counted span every phase: old alone, mixed, new alone, mixed, old alone.
    first = min(state.defined_at for state in store.states(namespace).values())
    assert upgrade - first >= timedelta(seconds=ALONE - 1), (first, upgrade)
    assert downgrade - upgrade >= timedelta(seconds=3 * BETWEEN_STEPS + ALONE), upgrade
    assert complete_until - downgraded >= timedelta(seconds=ALONE - 1), downgraded
    assert verdict.expected >= 6 * len(SCHEDULE)
    assert error_lines(beats) == [], beats.logs()
    store.close()
