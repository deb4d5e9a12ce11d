"""examples/helm-app: an application chart running beat as a sidecar in its three pods."""

from __future__ import annotations

import shutil
from pathlib import Path

import helm_python as helm
import pytest
import yaml

from tests.chart.rendering import (
    CHART,
    KUBE_VERSIONS,
    container,
    env,
    kinds,
    lint,
    one,
    render,
    validate,
)

MONITORING_ON = {
    "safebeat": {
        "metrics": {"serviceMonitor": {"enabled": True}},
        "prometheusRule": {"enabled": True},
        "dashboard": {"enabled": True},
    }
}


def test_dependency_is_the_repository_chart(example_chart: Path) -> None:
    """`helm dependency update` packs this repository's chart into the example's charts/."""
    with helm.Chart.load(example_chart) as chart:
        [dependency] = chart.dependencies
    assert (dependency["name"], dependency["version"]) == ("safebeat", "0.1.0")
    assert [p.name for p in (example_chart / "charts").iterdir()] == ["safebeat-0.1.0.tgz"]


def test_three_replicas_each_with_a_beat_sidecar(example_chart: Path) -> None:
    """The app's Deployment has 3 replicas, each pod a web and a beat container on one image."""
    manifests = render(example_chart, None, release="web")
    [deployment] = [m for m in manifests if m["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["web", "beat"]
    web, beat = container(pod, "web"), container(pod, "beat")
    assert beat["image"] == web["image"] == "registry.example.com/proj:1.42.0"
    assert beat["command"] == [
        *("celery", "-A", "proj", "beat", "-S", "safebeat.Scheduler"),
        *("--loglevel", "INFO"),
    ]
    assert env(beat)["SAFEBEAT_URL"] == {"secretKeyRef": {"name": "proj-safebeat", "key": "url"}}
    assert env(beat)["SAFEBEAT_AUTO_MIGRATE"] == "false"
    assert pod["enableServiceLinks"] is False
    assert beat["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "safebeat-tmp", "mountPath": "/tmp"} in beat["volumeMounts"]  # noqa: S108
    assert "safebeat-tmp" in {v["name"] for v in pod["volumes"]}


def test_sidecar_never_gates_the_app_pods_readiness(example_chart: Path) -> None:
    """The sidecar has startup and liveness probes on /livez, and no readiness probe unless
    asked for: a store outage never takes the app's pods out of their Service."""
    pod = one(render(example_chart, None), "Deployment")["spec"]["template"]["spec"]
    beat = container(pod, "beat")
    assert beat["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "beat-probes"}
    assert beat["startupProbe"]["httpGet"] == {"path": "/livez", "port": "beat-probes"}
    assert "readinessProbe" not in beat
    values = {"safebeat": {"probes": {"readiness": {"sidecar": True}}}}
    pod = one(render(example_chart, values), "Deployment")["spec"]["template"]["spec"]
    readiness = container(pod, "beat")["readinessProbe"]
    assert readiness["httpGet"] == {"path": "/readyz", "port": "beat-probes"}


def test_the_safebeat_chart_adds_the_hook_and_no_beats_of_its_own(example_chart: Path) -> None:
    """In sidecar mode the dependency renders the migration Job (same image), no Deployment.

    Its `helm test` Pod comes along: `helm test web` checks the sidecars' heartbeats.
    """
    manifests = render(example_chart, None, release="web")
    assert kinds(manifests) == ["Deployment", "Job", "Pod", "PodDisruptionBudget", "Service"]
    assert one(manifests, "Pod")["metadata"]["annotations"]["helm.sh/hook"] == "test"
    job = one(manifests, "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    image = container(job["spec"]["template"]["spec"], "migrate")["image"]
    assert image == "registry.example.com/proj:1.42.0"


def test_one_global_image_moves_web_beat_and_migration_together(example_chart: Path) -> None:
    """Changing `global.image.tag` changes the web, beat and migration images alike."""
    manifests = render(example_chart, {"global": {"image": {"tag": "1.43.0"}}})
    images = {
        c["image"]
        for m in manifests
        if m["kind"] in {"Deployment", "Job"}
        for c in m["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"registry.example.com/proj:1.43.0"}


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("monitoring", [False, True], ids=["plain", "monitoring"])
def test_every_manifest_is_valid_kubernetes(
    example_chart: Path, kube_version: str, monitoring: bool
) -> None:
    """Every manifest of the example, with and without the monitoring objects, is valid."""
    manifests = render(example_chart, MONITORING_ON if monitoring else None)
    for manifest in manifests:
        validate(manifest, kube_version)


def test_metrics_service_selects_the_example_pods(example_chart: Path) -> None:
    """With a ServiceMonitor, the metrics Service selects exactly the example's pod labels."""
    manifests = render(example_chart, MONITORING_ON, release="web")
    pods = one(manifests, "Deployment")["spec"]["template"]["metadata"]["labels"]
    metrics = next(m for m in manifests if m["metadata"]["name"] == "web-safebeat-metrics")
    assert metrics["spec"]["selector"] == pods
    assert metrics["spec"]["ports"][0]["targetPort"] == "beat-metrics"


@pytest.mark.parametrize("values", [None, MONITORING_ON], ids=["plain", "monitoring"])
def test_lint_is_clean(example_chart: Path, values: dict[str, object] | None) -> None:
    """`helm lint --strict` finds nothing in the example application chart."""
    assert lint(example_chart, values) == []


def test_including_the_sidecar_in_standalone_mode_is_refused(example_chart: Path) -> None:
    """Including safebeat.sidecar while the dependency is in standalone mode fails, saying so."""
    with pytest.raises(helm.HelmRenderError, match=r"set safebeat\.mode to sidecar"):
        render(example_chart, {"safebeat": {"mode": "standalone"}})


def test_sidecar_under_an_alias(tmp_path: Path) -> None:
    """A chart aliasing the dependency `beat` includes the sidecar with its values passed in."""
    app = tmp_path / "aliased"
    (app / "templates").mkdir(parents=True)
    (app / "charts").mkdir()
    shutil.copytree(CHART, app / "charts" / "safebeat")
    chart = {
        "apiVersion": "v2",
        "name": "aliased",
        "version": "0.1.0",
        "dependencies": [{"name": "safebeat", "version": "0.1.0", "alias": "beat"}],
    }
    (app / "Chart.yaml").write_text(yaml.safe_dump(chart))
    values = {
        "beat": {
            "mode": "sidecar",
            "app": "proj",
            "image": {"repository": "registry.example.com/proj", "tag": "2"},
            "store": {"existingSecret": "proj-safebeat"},
        }
    }
    (app / "values.yaml").write_text(yaml.safe_dump(values))
    (app / "templates" / "pod.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: app\nspec:\n  containers:\n"
        '    {{- include "safebeat.sidecar" (dict "values" .Values.beat) | nindent 4 }}\n'
        "  volumes:\n"
        '    {{- include "safebeat.sidecarVolumes" (dict "values" .Values.beat) | nindent 4 }}\n'
    )
    [pod] = [m for m in render(app, None) if m["metadata"]["name"] == "app"]
    validate(pod, KUBE_VERSIONS[-1])
    assert container(pod["spec"], "beat")["image"] == "registry.example.com/proj:2"
