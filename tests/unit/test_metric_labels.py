"""The labels safebeat's metrics carry: a namespace label that no scraper rewrites, no
per-process identity on a counter, no `_created` series."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from prometheus_client import generate_latest

from safebeat.beat.metrics import BEAT_METRICS, BeatMetrics
from safebeat.prometheus_table import NAMESPACE, Metric
from safebeat.worker.metrics import WORKER_METRICS, WorkerMetrics

WINDOW = datetime(2026, 1, 5, 9, tzinfo=timezone.utc)


@pytest.mark.parametrize("metric", [*BEAT_METRICS, *WORKER_METRICS], ids=lambda m: m.name)
def test_every_metric_names_its_namespace_safebeat_namespace(metric: Metric) -> None:
    """`namespace` is the pod's Kubernetes namespace once scraped; ours is never called that."""
    assert metric.labels[0] == NAMESPACE == "safebeat_namespace"
    assert "namespace" not in metric.labels


@pytest.mark.parametrize(
    "metric",
    [m for m in (*BEAT_METRICS, *WORKER_METRICS) if m.name != "safebeat_replica_info"],
    ids=lambda m: m.name,
)
def test_only_the_info_metric_names_the_replica(metric: Metric) -> None:
    """A replica id is new at every restart: on a counter it would start a series per entry."""
    assert "replica" not in metric.labels


def test_two_processes_count_one_entrys_dispatches_in_the_same_series() -> None:
    """A restarted replica (a new id) continues the same series, which a rate() handles."""
    exported = []
    for replica in ("host:1:aaaa", "host:2:bbbb"):
        metrics = BeatMetrics("billing", replica, "sqlite:///x")
        metrics.recording = True
        metrics.dispatched("report", WINDOW, WINDOW + timedelta(seconds=1))
        text = generate_latest(metrics.registry).decode()
        exported.append(
            [ln for ln in text.splitlines() if ln.startswith("safebeat_dispatches_total")]
        )
    assert (
        exported[0]
        == exported[1]
        == ['safebeat_dispatches_total{entry="report",safebeat_namespace="billing"} 1.0']
    )


def test_a_served_registry_has_no_created_series() -> None:
    """Beat turns `_created` off before it serves: it would double every per-entry counter."""
    metrics = BeatMetrics("billing", "host:1:aaaa", "sqlite:///x")
    metrics.serve(0, address="127.0.0.1")
    metrics.skipped("report", "missed", 2)
    text = generate_latest(metrics.registry).decode()
    assert "safebeat_windows_skipped_total" in text
    assert "_created" not in text


def test_a_worker_counts_the_runs_it_took_over_by_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A takeover (a dead run's window run again) is counted; a plain start is not."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    metrics = WorkerMetrics()
    metrics.recording = True
    metrics.started("billing", "report", takeover=False)
    metrics.started("billing", "report", takeover=True)
    value = metrics.registry.get_sample_value(
        "safebeat_runs_taken_over_total", {"safebeat_namespace": "billing", "entry": "report"}
    )
    assert value == 1
