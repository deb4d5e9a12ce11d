"""The chart's `safebeat exporter`: off by default; on, one pod that no beat selector counts,
scraped by its own ServiceMonitor, as safe as the beats' pods."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart import kube_linter
from tests.chart.rendering import (
    CHART,
    KUBE_VERSIONS,
    ci_values,
    container,
    merged,
    one,
    render,
    validate,
)


def with_exporter(
    value_set: str = "all-features", metrics: dict[str, Any] | None = None, **exporter: Any
) -> list[dict[str, Any]]:
    values = {"exporter": {"enabled": True, **exporter}, "metrics": metrics or {}}
    return render(CHART, merged(ci_values(value_set), values))


def exporter_parts(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {m["kind"]: m for m in manifests if m["metadata"]["name"].endswith("-exporter")}


def test_no_exporter_unless_enabled() -> None:
    """The default install renders no exporter."""
    assert exporter_parts(render(CHART, ci_values("all-features"))) == {}


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_the_exporter_runs_once_and_is_scraped_by_its_own_service_monitor(
    kube_version: str,
) -> None:
    """One replica runs `safebeat -A <app> exporter` with the store Secret; its Service and
    ServiceMonitor point at its port; every manifest is valid."""
    manifests = with_exporter(maxEntries=50, interval="15s")
    parts = exporter_parts(manifests)
    assert set(parts) == {"Deployment", "Service", "ServiceMonitor"}
    deployment = parts["Deployment"]
    assert deployment["spec"]["replicas"] == 1
    spec = deployment["spec"]["template"]["spec"]
    exporter = container(spec, "exporter")
    assert exporter["command"][:4] == ["safebeat", "-A", "proj.celery", "exporter"]
    assert exporter["command"][4:] == [
        "--port", "9810", "--interval", "15s", "--grace", "60s", "--max-entries", "50",
    ]  # fmt: skip
    names = {e["name"] for e in exporter["env"]}
    assert {"SAFEBEAT_URL", "SAFEBEAT_NAMESPACE"} <= names
    assert exporter["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["runAsNonRoot"] is True
    endpoint = parts["ServiceMonitor"]["spec"]["endpoints"][0]
    assert endpoint["port"] == parts["Service"]["spec"]["ports"][0]["name"] == "exporter"
    for manifest in parts.values():
        validate(manifest, kube_version)


def test_no_beat_selector_counts_the_exporter_pod() -> None:
    """The beats' Deployment, PDB and metrics Service select component=beat; the exporter's
    pod is component=exporter, so it is never one of the replicas."""
    manifests = with_exporter()
    pod_labels = exporter_parts(manifests)["Deployment"]["spec"]["template"]["metadata"]["labels"]
    beat = one([m for m in manifests if m["kind"] == "Deployment"
                and not m["metadata"]["name"].endswith("-exporter")], "Deployment")  # fmt: skip
    selectors = [beat["spec"]["selector"]["matchLabels"]]
    selectors += [
        m["spec"]["selector"]["matchLabels"]
        for m in manifests
        if m["kind"] == "PodDisruptionBudget"
    ]
    for selector in selectors:
        assert not selector.items() <= pod_labels.items(), selector


def test_with_pod_monitors_the_exporter_gets_its_own_pod_monitor() -> None:
    """`metrics.podMonitor` instead of the ServiceMonitor: the exporter is scraped the same way."""
    values = {"serviceMonitor": {"enabled": False}, "podMonitor": {"enabled": True}}
    parts = exporter_parts(with_exporter(metrics=values))
    assert set(parts) == {"Deployment", "Service", "PodMonitor"}
    endpoint = parts["PodMonitor"]["spec"]["podMetricsEndpoints"][0]
    assert endpoint["port"] == "exporter"
    validate(parts["PodMonitor"], KUBE_VERSIONS[-1])


@pytest.mark.parametrize("value_set", ["standalone", "all-features", "sidecar"])
def test_the_exporter_meets_kube_linters_default_checks(value_set: str) -> None:
    """Rendered with the exporter on, no default check fails unwaived."""
    assert kube_linter.unwaived(with_exporter(value_set)) == []
