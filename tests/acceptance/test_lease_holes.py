"""Real beat and worker processes on PostgreSQL, each hit by the fault that once ran a
window twice or lost it: a failed publish record (issue 29, hole 1), a cut connection at the
end of a run (hole 2) and, under acks early, a deferred copy the broker refuses (hole 4).
The unit, contract and simulation tests check the rules; these check that a real beat, a
real worker and a real server keep them.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
import redis

from safebeat.identity import task_id_for
from safebeat.stores.postgres import PostgresStore
from safebeat.stores.protocols import Claim, NewClaim, Outcome, Status
from tests import runscope
from tests.acceptance.test_workers import (
    claim_as_dead_replica,
    claim_window,
    cluster,
    publish,
    traces,
    wait_for,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]

LEASE = 3  # seconds, renewed every second
CLAIM_TIMEOUT = 2  # seconds: beat's take-over pass runs every second


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = runscope.unique("holes")
    yield name
    redis.Redis.from_url(redis_url).delete(name)


@pytest.fixture
def fail_one_publish_record(pg_url: str, namespace: str) -> Iterator[None]:
    """Make the first UPDATE that records a publish (`claimed` -> `sent`) of `namespace`
    fail once, as a store blip at `record_publish` does; a sequence counts across
    transactions, so only that one statement fails."""
    tag = namespace.replace("-", "_")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE SEQUENCE fail_{tag}")
        conn.execute(
            f"""
            CREATE FUNCTION fail_{tag}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF NEW.namespace = '{namespace}' AND OLD.status = 'claimed'
                 AND NEW.status = 'sent' AND nextval('fail_{tag}') = 1 THEN
                RAISE EXCEPTION 'injected: recording the publish fails once';
              END IF;
              RETURN NEW;
            END $$"""
        )
        conn.execute(
            f"CREATE TRIGGER fail_{tag} BEFORE UPDATE ON safebeat_dispatch "
            f"FOR EACH ROW EXECUTE FUNCTION fail_{tag}()"
        )
    yield
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP TRIGGER fail_{tag} ON safebeat_dispatch")
        conn.execute(f"DROP FUNCTION fail_{tag}()")
        conn.execute(f"DROP SEQUENCE fail_{tag}")


@pytest.mark.usefixtures("fail_one_publish_record")
def test_a_failed_publish_record_never_runs_a_live_window_twice(
    tmp_path: Path, pg_url: str, redis_url: str, queue: str, namespace: str
) -> None:
    """A real beat whose store fails once while recording a publish leaves that claim
    `claimed`; past the claim timeout it re-publishes the window while its run, longer
    than the claim timeout, is alive on a real worker: the copy waits for the run and is
    skipped once the run ends, so the window runs once."""
    store = PostgresStore(pg_url)
    processes = cluster(
        tmp_path,
        redis_url,
        queue,
        store_url=pg_url,
        namespace=namespace,
        schedule={"slow": {"seconds": 5, "sleep": 7.0}},
        SAFEBEAT_EXECUTION_LEASE=str(LEASE),
        SAFEBEAT_CLAIM_TIMEOUT=str(CLAIM_TIMEOUT),
    )
    processes.start(1)
    processes.start_workers(1, pool="threads", concurrency=4)
    try:
        processes.wait_started()
        # The window whose publish record failed is re-published (a second attempt),
        # and its run's end is recorded; then wait for a wrongly taken-over run.
        deadline = time.monotonic() + 45
        while not [r for r in store.history(namespace, limit=20) if r.attempts >= 2]:
            assert time.monotonic() < deadline, processes.logs()
            time.sleep(0.2)
        [hit] = [r for r in store.history(namespace, limit=20) if r.attempts >= 2]
        time.sleep(LEASE + CLAIM_TIMEOUT + 1)
        while True:
            [row] = [r for r in store.history(namespace, limit=20) if r.id == hit.id]
            if row.finished_at is not None:
                break
            assert time.monotonic() < deadline, processes.logs()
            time.sleep(0.2)
    finally:
        processes.stop()  # warm shutdown: a wrong second run would leave its trace
    logs = processes.logs(400)
    assert "injected: recording the publish fails once" in logs
    starts = Counter(t["task_id"] for t in traces(tmp_path))
    assert starts[row.task_id] == 1, logs
    assert all(count == 1 for count in starts.values()), (starts, logs)
    assert (row.runs, row.outcome) == (1, Outcome.SUCCESS), f"{row}\n{logs}"
    store.close()


def test_a_cut_store_connection_during_the_body_never_runs_a_finished_window_again(
    tmp_path: Path, pg_url: str, redis_url: str, queue: str, namespace: str
) -> None:
    """A real worker whose store connections are ended by the server
    (`pg_terminate_backend`) while the task body runs records the window finished all
    the same, and beat does not run it again after a lease and a claim timeout."""
    store = PostgresStore(pg_url)
    processes = cluster(
        tmp_path,
        redis_url,
        queue,
        store_url=pg_url,
        namespace=namespace,
        schedule={"job": {"seconds": 3600, "sleep": 4.0}},  # beat re-publishes "job" so
        SAFEBEAT_EXECUTION_LEASE=str(LEASE),
        SAFEBEAT_CLAIM_TIMEOUT=str(CLAIM_TIMEOUT),
    )
    processes.start(1)
    processes.start_workers(1, pool="threads", concurrency=2)
    try:
        processes.wait_started()
        # Claimed, published and recorded well within the claim timeout, as beat does:
        # beat's take-over has no reason to send a second copy.
        claim = claim_window(store, namespace, "job")
        publish(redis_url, queue, claim, copies=1, sleep=4.0)
        store.record_publish(namespace, [claim.id], {})  # as beat confirms a publish
        wait_for(store, namespace, lambda r: r.started_at is not None, processes)
        store.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            # Every other session of this database: the worker's (and beat's), as a
            # restart or failover of the server would.
            ended = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        assert ended is not None
        assert ended[0] >= 1
        done = wait_for(store, namespace, lambda r: r.finished_at is not None, processes)
        time.sleep(LEASE + CLAIM_TIMEOUT + 3)  # a run looking dead would be run again
        [row] = store.history(namespace, limit=1)
    finally:
        processes.stop()
    logs = processes.logs(400)
    assert [t["task_id"] for t in traces(tmp_path)] == [claim.task_id], logs
    assert (done.outcome, row.runs, row.outcome, row.status) == (
        Outcome.SUCCESS,
        1,
        Outcome.SUCCESS,
        Status.SENT,
    ), f"{row}\n{logs}"
    store.close()


def claim_windows(store: PostgresStore, namespace: str, entry: str, count: int) -> list[Claim]:
    """Claim `count` windows of `entry`, a minute apart and an hour back, as a beat did."""
    first = store.clock().replace(microsecond=0) - timedelta(hours=1)
    windows = [first + timedelta(minutes=i) for i in range(count)]
    new = [NewClaim(entry, w, task_id_for(namespace, entry, w), "workers.record") for w in windows]
    return claim_as_dead_replica(store, namespace, new)


def test_under_acks_early_a_refused_deferral_of_a_forbid_window_still_runs_once(
    tmp_path: Path, pg_url: str, redis_url: str, queue: str, namespace: str
) -> None:
    """Hole 4. A real worker with acks early gets two windows of a `forbid` entry at once:
    one runs, the other is deferred, and the broker refuses its copy. Its message is
    acknowledged already, so the hook leaves the window to beat as a run that died at
    once; a real beat re-publishes it, and it runs once, after the first."""
    store = PostgresStore(pg_url)
    processes = cluster(
        tmp_path,
        redis_url,
        queue,
        store_url=pg_url,
        namespace=namespace,
        # Defined so beat's take-over pass re-publishes its windows; its own first window
        # is an hour away.
        schedule={"job": {"seconds": 3600, "sleep": 3.0, "overlap": "forbid"}},
        SB_ACKS_LATE="0",
        SB_REFUSE_DELAYED="1",
        SAFEBEAT_EXECUTION_LEASE=str(LEASE),
        SAFEBEAT_CLAIM_TIMEOUT=str(CLAIM_TIMEOUT),
    )
    processes.start(1)
    processes.start_workers(1, pool="threads", concurrency=2)
    try:
        processes.wait_started()
        claims = claim_windows(store, namespace, "job", 2)
        for claim in claims:
            publish(
                redis_url,
                queue,
                claim,
                copies=1,
                sleep=3.0,
                options={"safebeat": {"overlap": "forbid"}},
            )
        store.record_publish(namespace, [c.id for c in claims], {})  # as beat confirms
        deadline = time.monotonic() + 40
        while True:
            rows = store.history(namespace, "job", limit=10)
            if len(rows) == 2 and all(r.outcome is not None for r in rows):
                break
            assert time.monotonic() < deadline, f"{rows}\n{processes.logs(200)}"
            time.sleep(0.2)
    finally:
        processes.stop()
    logs = processes.logs(400)
    assert "injected: the broker refuses this publish" in logs
    assert "acknowledged already (acks early)" in logs
    runs = sorted(traces(tmp_path), key=lambda t: t["started"])
    assert sorted(t["task_id"] for t in runs) == sorted(c.task_id for c in claims), logs
    for before, after in itertools.pairwise(runs):
        assert after["started"] >= before["finished"], f"{before} overlaps {after}"
    assert all(r.outcome is Outcome.SUCCESS for r in rows), f"{rows}\n{logs}"
    assert sorted(r.attempts for r in rows) == [1, 2], f"{rows}\n{logs}"  # one re-publish
    store.close()
