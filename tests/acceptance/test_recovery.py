"""A worker SIGKILLed mid-run with the default settings: its window completes once more, once.

Real processes: `celery beat -S safebeat.Scheduler` on PostgreSQL, and a prefork worker with
the hook, both on the library's default lease, renewal and take-over pacing (nothing set).
The worker's whole process tree is killed while the window runs and a fresh worker takes
its place. On RabbitMQ with acks late the broker gives the message back at once and the
hook defers it until the dead run's lease lapsed; on Redis with acks early no broker
delivers it again and beat's take-over pass re-publishes it. Either way the body must
complete exactly once. How soon is a figure for `tests/benchmarks/bench_recovery.py`;
here the only bound on time is a guard against a hang.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from kombu import Connection, Exchange, Queue

from safebeat.records import Outcome
from safebeat.stores.postgres import PostgresStore
from tests import runscope, services
from tests.acceptance.harness import kill_tree
from tests.acceptance.test_workers import claim_window, cluster, publish, traces, wait_for

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]

TASK_SECONDS = 4.0
#: A guard against a hang, far above the default recovery (about one 10 s lease).
HANG_GUARD = 90.0


@pytest.fixture(params=["rabbitmq-acks-late", "redis-acks-early"])
def broker(request: pytest.FixtureRequest, redis_url: str) -> Iterator[tuple[str, str, bool]]:
    """(broker url, queue, acks late), the queue removed afterwards."""
    queue = runscope.unique("recovery")
    if request.param == "redis-acks-early":
        yield redis_url, queue, False
        keys = ("unacked", "unacked_index", "unacked_mutex")
        redis.Redis.from_url(redis_url).delete(queue, *(f"{queue}.{key}" for key in keys))
        return
    amqp = services.amqp_url()
    if amqp is None:
        pytest.skip("no RabbitMQ broker runs here (set SAFEBEAT_TEST_AMQP_URL)")
    yield amqp, queue, True
    with Connection(amqp) as conn:  # the queue and its exchange, whatever happened
        channel = conn.default_channel
        Queue(queue, Exchange(queue), routing_key=queue)(channel).delete()
        Exchange(queue)(channel).delete()


def test_a_worker_killed_mid_run_with_the_default_settings_completes_its_window_once(
    tmp_path: Path, pg_url: str, namespace: str, broker: tuple[str, str, bool]
) -> None:
    broker_url, queue, acks_late = broker
    store = PostgresStore(pg_url)
    claim = claim_window(store, namespace, "job")
    processes = cluster(
        tmp_path,
        broker_url,
        queue,
        store_url=pg_url,
        namespace=namespace,
        schedule={"job": {"seconds": 3600, "sleep": TASK_SECONDS}},  # beat defines "job"
        SB_ACKS_LATE="1" if acks_late else "0",
    )
    for setting in ("SAFEBEAT_EXECUTION_LEASE", "SAFEBEAT_CLAIM_TIMEOUT"):
        assert setting not in os.environ, f"{setting} is set: this test is of the defaults"
    processes.start(1)
    processes.start_workers(1, pool="prefork", concurrency=1)
    try:
        processes.wait_started()
        publish(broker_url, queue, claim, copies=1, sleep=TASK_SECONDS)
        store.record_publish(namespace, [claim.id], {})  # as beat confirms a publish
        wait_for(store, namespace, lambda r: r.started_at is not None, processes)
        time.sleep(1.0)  # mid-run
        kill_tree(processes.processes[1].pid)
        killed = time.time()
        processes.start_workers(1, pool="prefork", concurrency=1)  # the replacement
        done = wait_for(
            store,
            namespace,
            lambda r: r.outcome is Outcome.SUCCESS,
            processes,
            timeout=HANG_GUARD,
        )
        time.sleep(2.0)  # let a wrongly run second copy leave its trace
    finally:
        processes.stop()
    ran = [t for t in traces(tmp_path) if t["task_id"] == claim.task_id]
    assert len(ran) == 1, processes.logs()
    assert done.runs == 2, f"{done}\n{processes.logs()}"
    print(f"restarted {ran[0]['started'] - killed:.1f}s after the kill")
    store.close()
