"""Real `celery beat` and `celery worker` processes serving metrics, named as documented."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from safebeat.stores.sqlite import SqliteStore
from tests import runscope, services
from tests.acceptance.harness import Cluster
from tests.acceptance.test_workers import claim_window, publish, wait_for
from tests.acceptance.test_workers import cluster as worker_cluster
from tests.unit.test_monitoring import documented_metrics

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = runscope.unique("metrics")
    yield name
    redis.Redis.from_url(redis_url).delete(name)


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by name from http://127.0.0.1:port/metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def scrape_until(
    port: int,
    ready: Callable[[dict[str, list[tuple[dict[str, str], float]]]], bool],
    seconds: float = 15.0,
) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Scrape until `ready` holds (a child counts just after it writes the store), or the
    last scrape once `seconds` have passed, for the assertions to name what is missing."""
    deadline = time.monotonic() + seconds
    while not ready(samples := scrape(port)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return samples


def metric_names(samples: dict[str, list[tuple[dict[str, str], float]]]) -> set[str]:
    """The safebeat metrics scraped, by the name docs/metrics.md gives them."""
    return {
        name.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
        for name in samples
        if name.startswith("safebeat_") and not name.endswith("_created")
    }


def sample(
    samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str
) -> float:
    """The one value of `name` whose labels include `labels`."""
    matches = [v for found, v in samples.get(name, []) if labels.items() <= found.items()]
    assert len(matches) == 1, (name, labels, samples.get(name))
    return matches[0]


def test_a_running_beat_serves_the_documented_metrics(
    tmp_path: Path, redis_url: str, queue: str, namespace: str
) -> None:
    """Scraping a beat that ran a few seconds shows every documented metric, with real values."""
    port = services.free_port()
    beats = Cluster(
        workdir=tmp_path,
        broker_url=redis_url,
        queue=queue,
        schedule={"every-1s": 1.0},
        env={
            "SAFEBEAT_URL": f"sqlite:///{tmp_path}/safebeat.sqlite3",
            "SAFEBEAT_NAMESPACE": namespace,
            "SAFEBEAT_METRICS_PORT": str(port),
        },
    )
    beats.start(1)
    try:
        beats.wait_started()
        time.sleep(4)
        samples = scrape(port)
    finally:
        beats.stop()

    exposed = metric_names(samples)
    documented = set(documented_metrics("From beat"))
    # Per-entry counters appear with an entry's first event; this run has none of these.
    quiet = {
        "safebeat_windows_skipped_total",
        "safebeat_republished_total",
        "safebeat_entry_errors_total",
        "safebeat_entry_broken",
    }
    assert documented - quiet <= exposed, documented - quiet - exposed
    assert exposed <= documented, exposed - documented

    def value(name: str, **labels: str) -> float:
        return sample(samples, name, **labels)

    assert value("safebeat_dispatches_total", entry="every-1s", safebeat_namespace=namespace) >= 2
    assert value("safebeat_dispatch_lag_seconds_count", safebeat_namespace=namespace) >= 2
    assert value("safebeat_entries", safebeat_namespace=namespace) == 1
    assert value("safebeat_replicas_alive", safebeat_namespace=namespace) == 1
    assert value("safebeat_replica_info", safebeat_namespace=namespace) == 1
    assert value("safebeat_tick_duration_seconds_count", safebeat_namespace=namespace) >= 2
    assert value("safebeat_ticks_succeeded_total", safebeat_namespace=namespace) >= 2
    assert value("safebeat_store_errors_total", kind="unavailable") == 0


def test_a_prefork_worker_serves_what_its_children_counted(
    tmp_path: Path, redis_url: str, queue: str, namespace: str
) -> None:
    """A prefork worker with PROMETHEUS_MULTIPROC_DIR serves its children's counts: one
    success and one duplicate skipped for a window delivered twice."""
    port = services.free_port()
    url = f"sqlite:///{tmp_path}/safebeat.sqlite3"
    store = SqliteStore(url)
    store.migrate()
    claim = claim_window(store, namespace, "report")
    (tmp_path / "prometheus").mkdir()
    workers = worker_cluster(
        tmp_path,
        redis_url,
        queue,
        store_url=url,
        namespace=namespace,
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "prometheus"),
        SAFEBEAT_WORKER_METRICS_PORT=str(port),
    )
    workers.start_workers(1, pool="prefork", concurrency=2)
    try:
        workers.wait_started()
        # The second copy goes out once the first has finished: one that arrives while the
        # first runs is deferred by its lease, not counted as a duplicate.
        publish(redis_url, queue, claim, copies=1, sleep=0)
        wait_for(store, namespace, lambda r: r.finished_at, workers)
        publish(redis_url, queue, claim, copies=1, sleep=0)
        wait_for(store, namespace, lambda r: r.duplicates >= 1, workers)
        counted = ("safebeat_executions_total", "safebeat_duplicates_suppressed_total")
        samples = scrape_until(port, lambda found: all(name in found for name in counted))
    finally:
        workers.stop()

    def value(name: str, **labels: str) -> float:
        return sample(samples, name, **labels)

    ours = {"safebeat_namespace": namespace, "entry": "report"}
    assert value("safebeat_executions_total", outcome="success", **ours) == 1
    assert value("safebeat_duplicates_suppressed_total", **ours) == 1
    assert value("safebeat_last_success_timestamp_seconds", **ours) > time.time() - 60
    assert value("safebeat_task_runtime_seconds_count", safebeat_namespace=namespace) == 1
    documented = set(documented_metrics("From workers"))
    exposed = metric_names(samples)
    # Nothing ran untracked, no delivery was deferred or took a run over and no entry was
    # paused here, so those
    # per-entry counters have no sample yet.
    unsampled = {
        "safebeat_executions_untracked_total",
        "safebeat_deliveries_deferred_total",
        "safebeat_paused_after_failures_total",
        "safebeat_runs_taken_over_total",
    }
    assert exposed == documented - unsampled, exposed ^ documented
