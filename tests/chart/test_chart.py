"""The Helm chart charts/safebeat, rendered and linted by Helm's own Go code, offline."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yamale
import yaml
from click.testing import CliRunner
from yamllint import linter as yamllint_linter
from yamllint.config import YamlLintConfig

from safebeat.cli import main as safebeat_cli
from safebeat.config import SETTINGS
from safebeat.identity import Replica
from safebeat.stores.sqlite import SqliteStore
from tests.chart.rendering import (
    CHART,
    CRD_KINDS,
    KUBE_VERSIONS,
    ROOT,
    ci_values,
    container,
    env,
    kinds,
    lint,
    merged,
    notes,
    one,
    pod_specs,
    render,
    validate,
)

VALUE_SETS = ("standalone", "all-features", "sidecar", "no-migrate")
TMP = "/tmp"  # noqa: S108 - the mount point of the emptyDir, not a file we create
STANDALONE = ci_values("standalone")
#: Sidecar mode with a ServiceMonitor (and its metrics Service) instead of the PodMonitor.
SIDECAR_SERVICE_MONITOR = merged(
    ci_values("sidecar"),
    {"metrics": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": False}}},
)


def beat(values: dict[str, Any]) -> dict[str, Any]:
    """The beat container of the standalone Deployment."""
    deployment = one(render(CHART, values), "Deployment")
    return container(deployment["spec"]["template"]["spec"], "beat")


@pytest.mark.parametrize("value_set", ["defaults", *VALUE_SETS])
def test_lint_is_clean(value_set: str) -> None:
    """`helm lint --strict` finds nothing in the chart, bare or with each value set of ci/."""
    assert lint(CHART, None if value_set == "defaults" else ci_values(value_set)) == []


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_every_manifest_is_valid_kubernetes(value_set: str, kube_version: str) -> None:
    """Every manifest rendered with each value set passes Kubernetes' strict schema check."""
    manifests = render(CHART, ci_values(value_set))
    assert manifests
    for manifest in manifests:
        validate(manifest, kube_version)


def test_validation_catches_a_broken_manifest() -> None:
    """The schema check rejects a rendered Deployment with a misspelled field."""
    deployment = one(render(CHART, STANDALONE), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["comand"] = ["celery"]
    with pytest.raises(kubernetes_validate.ValidationError, match="comand"):
        validate(deployment, KUBE_VERSIONS[-1])


def test_the_value_sets_render_what_they_promise() -> None:
    """Standalone renders beats, a PDB and the hooks; every option adds the monitoring objects."""
    assert kinds(render(CHART, STANDALONE)) == ["Deployment", "Job", "Pod", "PodDisruptionBudget"]
    assert kinds(render(CHART, ci_values("all-features"))) == [
        "ConfigMap",
        "Deployment",
        "Job",
        "Pod",
        "PodDisruptionBudget",
        "PodMonitor",
        "PrometheusRule",
        "Service",
        "ServiceMonitor",
    ]
    # Sidecar mode: the beats live in the application's pods, not here.
    assert kinds(render(CHART, ci_values("sidecar"))) == [
        "ConfigMap",
        "Job",
        "Pod",
        "PodMonitor",
        "PrometheusRule",
    ]
    assert kinds(render(CHART, SIDECAR_SERVICE_MONITOR)) == [
        "ConfigMap",
        "Job",
        "Pod",
        "PrometheusRule",
        "Service",
        "ServiceMonitor",
    ]


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({}, "image.repository"),
        (merged(STANDALONE, {"app": ""}), "set app"),
        (merged(STANDALONE, {"image": {"repository": ""}}), "image.repository"),
        (merged(STANDALONE, {"store": {"existingSecret": ""}}), "store.existingSecret"),
        (merged(STANDALONE, {"image": {"tag": ""}}), "set image.tag (not latest)"),
        (merged(STANDALONE, {"image": {"tag": "latest"}}), "set image.tag (not latest)"),
    ],
)
def test_a_missing_required_value_is_named(values: dict[str, Any], named: str) -> None:
    """Rendering without the app, the image or the Secret fails with a message naming it."""
    with pytest.raises(helm.HelmRenderError, match=re.escape(named)):
        render(CHART, values)


def test_beat_runs_celery_beat_with_the_safebeat_scheduler() -> None:
    """The beat container runs `celery -A <app> beat -S safebeat.Scheduler`, extra args last."""
    assert beat(STANDALONE)["command"] == [
        "celery",
        "-A",
        "proj",
        "beat",
        "-S",
        "safebeat.Scheduler",
        "--loglevel",
        "INFO",
    ]
    assert beat(ci_values("all-features"))["command"][-2:] == ["--max-interval", "5"]


def test_store_url_comes_from_the_existing_secret() -> None:
    """SAFEBEAT_URL is a secretKeyRef to the named Secret and key, in beat and in the Job."""
    manifests = render(CHART, ci_values("all-features"))
    expected = {"secretKeyRef": {"name": "proj-safebeat", "key": "safebeat-url"}}
    for where, spec in pod_specs(manifests):
        assert env(spec["containers"][0])["SAFEBEAT_URL"] == expected, where


def test_settings_become_safebeat_environment_variables() -> None:
    """Each `settings` key becomes its SAFEBEAT_* variable; big numbers keep every digit."""
    variables = env(beat(ci_values("all-features")))
    assert variables["SAFEBEAT_NAMESPACE"] == "proj-production"
    assert variables["SAFEBEAT_CATCHUP_LIMIT"] == "1000000"
    assert variables["SAFEBEAT_CLAIM_TIMEOUT"] == "45"
    assert variables["SAFEBEAT_LOCK_TIMEOUT"] == "2.5s"
    assert variables["SAFEBEAT_METRICS_PORT"] == "9100"
    assert variables["SAFEBEAT_PROBE_PORT"] == "9101"
    assert variables["SAFEBEAT_LIVENESS_TIMEOUT"] == "2m"
    assert variables["DJANGO_SETTINGS_MODULE"] == "proj.settings"


def test_schema_settings_are_exactly_the_safebeat_settings() -> None:
    """`settings` accepts every safebeat setting but the URL, the metrics and probe ports
    and the workers' metrics port (the chart runs beat, not workers), and nothing else."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    accepted = set(schema["properties"]["settings"]["properties"])
    known = {name.removeprefix("safebeat_") for name in SETTINGS}
    assert accepted == known - {"url", "metrics_port", "probe_port", "worker_metrics_port"}


def test_probes_get_beats_own_endpoints_on_the_probe_port() -> None:
    """Startup and liveness GET /livez, readiness GET /readyz, on the port beat serves them on."""
    container_spec = beat(STANDALONE)
    paths = {"startupProbe": "/livez", "livenessProbe": "/livez", "readinessProbe": "/readyz"}
    for probe, path in paths.items():
        assert container_spec[probe]["httpGet"] == {"path": path, "port": "beat-probes"}, probe
        assert "exec" not in container_spec[probe], probe
    ports = {p["name"]: p["containerPort"] for p in container_spec["ports"]}
    assert ports == {"beat-probes": 9809, "beat-metrics": 9808}
    assert env(container_spec)["SAFEBEAT_PROBE_PORT"] == "9809"


def test_probe_timings_fit_beats_liveness_timeout() -> None:
    """Startup allows two minutes or more; liveness needs several failures; each probe is a
    GET answered from memory, so a short timeout does."""
    container_spec = beat(STANDALONE)
    startup, liveness = container_spec["startupProbe"], container_spec["livenessProbe"]
    # Importing the app, migrating and registering get two minutes or more.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120
    # A restart needs several failures in a row: one slow answer never restarts beat.
    assert liveness["failureThreshold"] >= 3
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container_spec[probe]["timeoutSeconds"] <= 5, probe


def test_probe_and_metrics_ports_must_differ() -> None:
    """One port for both is refused: beat serves each on its own server."""
    values = merged(STANDALONE, {"probes": {"port": 9808}})
    with pytest.raises(helm.HelmRenderError, match=r"probes\.port and metrics\.port"):
        render(CHART, values)
    values = merged(values, {"metrics": {"enabled": False}})
    assert [p["name"] for p in beat(values)["ports"]] == ["beat-probes"]


def test_pdb_always_allows_evicting_unready_beats() -> None:
    """The PDB sets unhealthyPodEvictionPolicy AlwaysAllow: a store outage, which makes every
    beat unready, never blocks a node drain."""
    for value_set in ("standalone", "all-features"):
        pdb = one(render(CHART, ci_values(value_set)), "PodDisruptionBudget")
        assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow", value_set


def test_pdb_min_available_of_every_replica_is_refused() -> None:
    """minAvailable equal to replicas would block every drain: rendering fails, naming both."""
    values = merged(STANDALONE, {"podDisruptionBudget": {"minAvailable": 2}})
    with pytest.raises(helm.HelmRenderError, match=r"minAvailable \(2\) must be below replicas"):
        render(CHART, values)


@pytest.mark.parametrize(
    ("budget", "kept"),
    [
        ({"minAvailable": "100%"}, "100% of 2 replicas, rounded up: 2"),
        ({"minAvailable": "51%"}, "51% of 2 replicas, rounded up: 2"),
    ],
)
def test_pdb_min_available_percentage_of_every_replica_is_refused(
    budget: dict[str, Any], kept: str
) -> None:
    """A percentage of minAvailable is rounded up by Kubernetes: one that keeps every replica
    would block every drain as well, so rendering fails, saying what it keeps."""
    values = merged(STANDALONE, {"podDisruptionBudget": budget})
    with pytest.raises(helm.HelmRenderError, match=re.escape(kept)):
        render(CHART, values)


@pytest.mark.parametrize(
    ("budget", "spec"),
    [
        ({"minAvailable": "50%"}, {"minAvailable": "50%"}),
        ({"maxUnavailable": "100%"}, {"maxUnavailable": "100%"}),
        ({"maxUnavailable": "1%"}, {"maxUnavailable": "1%"}),
    ],
)
def test_pdb_takes_a_percentage_that_lets_a_drain_through(
    budget: dict[str, Any], spec: dict[str, str]
) -> None:
    """Percentages from 1% (maxUnavailable) and below every replica (minAvailable) render."""
    pdb = one(
        render(CHART, merged(STANDALONE, {"podDisruptionBudget": budget})), "PodDisruptionBudget"
    )
    assert spec.items() <= pdb["spec"].items()


def test_service_monitor_and_pod_monitor_together_are_refused() -> None:
    """Both monitors would scrape each beat (and the exporter) twice, doubling every series
    the alerts sum: rendering fails, naming both values."""
    both = {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}}
    for values in (
        merged(STANDALONE, {"metrics": both}),
        merged(STANDALONE, {"metrics": {**both, "enabled": False}, "exporter": {"enabled": True}}),
        merged(ci_values("sidecar"), {"metrics": both}),
    ):
        with pytest.raises(
            helm.HelmRenderError,
            match=re.escape("metrics.serviceMonitor.enabled and metrics.podMonitor.enabled"),
        ):
            render(CHART, values)


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_containers_run_as_non_root_with_a_read_only_root_filesystem(value_set: str) -> None:
    """Every pod runs non-root, read-only, without privileges, service links or API token."""
    manifests = render(CHART, ci_values(value_set))
    for where, spec in pod_specs(manifests):
        assert spec["enableServiceLinks"] is False, where
        assert spec["automountServiceAccountToken"] is False, where
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        volumes = {v["name"]: v for v in spec["volumes"]}
        for container_spec in spec["containers"]:
            security = container_spec["securityContext"]
            assert security["runAsNonRoot"] is True, where
            assert security["runAsUser"] != 0, where
            assert security["readOnlyRootFilesystem"] is True, where
            assert security["allowPrivilegeEscalation"] is False, where
            assert security["capabilities"]["drop"] == ["ALL"], where
            mounts = {m["mountPath"]: m["name"] for m in container_spec["volumeMounts"]}
            assert "emptyDir" in volumes[mounts[TMP]], where


def test_migrate_job_is_a_pre_install_and_pre_upgrade_hook() -> None:
    """`safebeat migrate` runs as a hook before install and upgrade; beat then never migrates."""
    manifests = render(CHART, STANDALONE)
    job = one(manifests, "Job")
    annotations = job["metadata"]["annotations"]
    assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"].split(",")
    migrate = container(job["spec"]["template"]["spec"], "migrate")
    assert migrate["command"] == ["safebeat", "migrate"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert env(beat(STANDALONE))["SAFEBEAT_AUTO_MIGRATE"] == "false"


def test_without_the_migrate_job_beat_migrates_itself() -> None:
    """With `migrate.enabled: false` there is no Job, and beat keeps auto-migration on."""
    values = ci_values("no-migrate")
    assert "Job" not in kinds(render(CHART, values))
    assert env(beat(values))["SAFEBEAT_AUTO_MIGRATE"] == "true"


def test_auto_migrate_beside_the_migrate_job_is_refused() -> None:
    """Asking for auto-migration while the Job migrates is an error naming both values."""
    values = merged(STANDALONE, {"settings": {"auto_migrate": True}})
    with pytest.raises(helm.HelmRenderError, match=r"settings\.auto_migrate.*migrate\.enabled"):
        render(CHART, values)


@pytest.mark.parametrize("value_set", ["standalone", "all-features"])
def test_selectors_match_the_beat_pods_and_only_them(value_set: str) -> None:
    """The PDB and the metrics Service select the beat pods, never the migration Job's pod."""
    manifests = render(CHART, ci_values(value_set))
    deployment, job = one(manifests, "Deployment"), one(manifests, "Job")
    beat_labels = deployment["spec"]["template"]["metadata"]["labels"]
    job_labels = job["spec"]["template"]["metadata"]["labels"]
    selectors = [
        deployment["spec"]["selector"]["matchLabels"],
        one(manifests, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
    ]
    services = [m for m in manifests if m["kind"] == "Service"]
    selectors += [s["spec"]["selector"] for s in services]
    for selector in selectors:
        assert selector.items() <= beat_labels.items()
        assert not selector.items() <= job_labels.items()


def test_pdb_takes_min_available_instead_of_max_unavailable() -> None:
    """Setting minAvailable gives a PDB with only minAvailable, as Kubernetes requires."""
    pdb = one(render(CHART, ci_values("all-features")), "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 2
    assert "maxUnavailable" not in pdb["spec"]


def test_service_monitor_scrapes_the_beat_metrics_port() -> None:
    """The ServiceMonitor selects the metrics Service, whose port targets beat's metrics port."""
    manifests = render(CHART, ci_values("all-features"))
    monitor, service = one(manifests, "ServiceMonitor"), one(manifests, "Service")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["apps"]
    [endpoint] = monitor["spec"]["endpoints"]
    [port] = service["spec"]["ports"]
    assert endpoint["port"] == port["name"] == port["targetPort"]
    ports = {p["name"]: p["containerPort"] for p in beat(ci_values("all-features"))["ports"]}
    assert ports["beat-metrics"] == 9100
    assert endpoint["relabelings"] == [
        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}
    ]
    assert endpoint["metricRelabelings"] == [
        {
            "sourceLabels": ["__name__"],
            "regex": "safebeat_dispatch_lag_seconds_bucket",
            "action": "drop",
        }
    ]


def test_beat_pod_monitor_scrapes_the_sidecars_without_a_service() -> None:
    """In sidecar mode the PodMonitor selects the app's pods and scrapes `beat-metrics`."""
    monitor = one(render(CHART, ci_values("sidecar"), release="web"), "PodMonitor")
    assert monitor["metadata"]["name"] == "web-safebeat"
    assert monitor["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "helm-app",
        "app.kubernetes.io/instance": "web",
    }
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("beat-metrics", "/metrics")
    assert endpoint["metricRelabelings"][0]["action"] == "drop"
    assert "relabelings" not in endpoint


def test_beat_pod_monitor_of_standalone_beats_selects_them() -> None:
    """Standalone, the beats' PodMonitor selects the Deployment's pods, not the Job's."""
    values = merged(STANDALONE, {"metrics": {"podMonitor": {"enabled": True}}})
    manifests = render(CHART, values)
    selector = one(manifests, "PodMonitor")["spec"]["selector"]["matchLabels"]
    pods = one(manifests, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pods.items()
    assert selector["app.kubernetes.io/component"] == "beat"


def test_worker_pod_monitor_selects_the_workers_port() -> None:
    """workerMetrics renders a PodMonitor of the workers' labels (templates rendered) and port."""
    manifests = render(CHART, ci_values("all-features"))
    [monitor] = [m for m in manifests if m["metadata"]["name"] == "rel-safebeat-workers"]
    assert monitor["kind"] == "PodMonitor"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "proj-worker",
        "app.kubernetes.io/instance": "rel",
    }
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["apps"]
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["interval"]) == ("worker-metrics", "15s")
    assert endpoint["metricRelabelings"] == [{"regex": "queue", "action": "labeldrop"}]


@pytest.mark.parametrize(
    ("monitoring", "named"),
    [
        (
            {"workerMetrics": {"podMonitor": {"enabled": True}}},
            r"workerMetrics\.podMonitor\.podSelector",
        ),
        (
            {"mode": "sidecar", "metrics": {"podMonitor": {"enabled": True}}},
            r"metrics\.podSelector",
        ),
    ],
)
def test_pod_monitor_without_its_selector_is_refused(
    monitoring: dict[str, Any], named: str
) -> None:
    """A PodMonitor with nothing to select is an error naming the value to set."""
    with pytest.raises(helm.HelmRenderError, match=named):
        render(CHART, merged(STANDALONE, monitoring))


def test_sidecar_mode_metrics_service_selects_the_application_pods() -> None:
    """In sidecar mode the metrics Service selects `metrics.podSelector`, its templates rendered."""
    service = one(render(CHART, SIDECAR_SERVICE_MONITOR, release="web"), "Service")
    assert service["spec"]["selector"] == {
        "app.kubernetes.io/name": "helm-app",
        "app.kubernetes.io/instance": "web",
    }


def test_sidecar_mode_service_monitor_without_pod_selector_is_refused() -> None:
    """A ServiceMonitor in sidecar mode without `metrics.podSelector` is an error naming it."""
    values = merged(SIDECAR_SERVICE_MONITOR, {})
    values["metrics"]["podSelector"] = {}
    with pytest.raises(helm.HelmRenderError, match=r"metrics\.podSelector"):
        render(CHART, values)


def test_prometheus_rule_holds_the_alert_rules_with_its_labels() -> None:
    """The PrometheusRule carries its labels and the rules, at the values given (3 replicas)."""
    rule = one(render(CHART, ci_values("all-features")), "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert rules["SafebeatReplicasLow"]["expr"].endswith("< 3")


def test_dashboard_configmap_holds_the_dashboard_for_grafana() -> None:
    """The dashboard ConfigMap carries `grafana_dashboard: "1"` and monitoring/dashboard.json."""
    configmap = one(render(CHART, ci_values("all-features")), "ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "safebeat"}
    dashboard = json.loads((ROOT / "monitoring" / "dashboard.json").read_text())
    assert json.loads(configmap["data"]["safebeat.json"]) == dashboard


@pytest.mark.parametrize("name", ["dashboard.json"])
def test_chart_copies_of_the_monitoring_files_are_identical(name: str) -> None:
    """The chart's files/ holds byte-identical copies of monitoring/, which Helm can't read."""
    copy = (CHART / "files" / name).read_bytes()
    assert copy == (ROOT / "monitoring" / name).read_bytes(), f"cp monitoring/{name} {CHART}/files/"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"mode": "leader"}, "/mode"),
        ({"replica": 3}, "'replica' not allowed"),
        ({"replicas": -1}, "/replicas"),
        ({"image": {"tag": 1.4}}, "/image/tag"),
        ({"loglevel": "LOUD"}, "/loglevel"),
        ({"metrics": {"port": 70000}}, "/metrics/port"),
        ({"settings": {"misfire": "sometimes"}}, "/settings/misfire"),
        ({"settings": {"claim_timout": "30s"}}, "'claim_timout' not allowed"),
        ({"settings": {"claim_timeout": "30 seconds"}}, "/settings/claim_timeout"),
        ({"store": {"existingSecret": "Proj_DB"}}, "/store/existingSecret"),
        ({"probes": {"liveness": {"periodSeconds": 0}}}, "/probes/liveness/periodSeconds"),
        ({"probes": {"port": 0}}, "/probes/port"),
        ({"podDisruptionBudget": {"maxUnavailable": 0}}, "/podDisruptionBudget/maxUnavailable"),
        ({"podDisruptionBudget": {"maxUnavailable": "0%"}}, "/podDisruptionBudget/maxUnavailable"),
        (
            {"podDisruptionBudget": {"maxUnavailable": "150%"}},
            "/podDisruptionBudget/maxUnavailable",
        ),
        (
            {"podDisruptionBudget": {"maxUnavailable": "10.5%"}},
            "/podDisruptionBudget/maxUnavailable",
        ),
        ({"podDisruptionBudget": {"minAvailable": "101%"}}, "/podDisruptionBudget/minAvailable"),
        ({"podDisruptionBudget": {"minAvailable": "-1%"}}, "/podDisruptionBudget/minAvailable"),
        (
            {"podDisruptionBudget": {"unhealthyPodEvictionPolicy": "Never"}},
            "/podDisruptionBudget/unhealthyPodEvictionPolicy",
        ),
        ({"workerMetrics": {"podMonitor": {"port": "Bad_Port"}}}, "/workerMetrics/podMonitor/port"),
    ],
)
def test_schema_rejects_a_bad_value(bad: dict[str, Any], message: str) -> None:
    """values.schema.json rejects a wrong value or an unknown key, naming where it is."""
    with pytest.raises(helm.HelmValuesError, match=re.escape(message)):
        render(CHART, merged(STANDALONE, bad))


def _undeclared(values: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Keys of `values` that `schema` does not declare, walking declared objects."""
    if not isinstance(values, dict) or "properties" not in schema:
        return []
    missing = []
    for key, value in values.items():
        if key not in schema["properties"]:
            missing.append(f"{path}{key}")
        else:
            missing += _undeclared(value, schema["properties"][key], f"{path}{key}.")
    return missing


def test_schema_declares_every_value() -> None:
    """Every key of values.yaml and of the ci/ value sets is declared in values.schema.json."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    for values in [defaults, *(ci_values(name) for name in VALUE_SETS)]:
        assert _undeclared(values, schema, "") == []


def test_chart_versions() -> None:
    """The chart is version 0.1.0 and its appVersion is safebeat's version."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = re.search(r'__version__ = "(.+)"', (ROOT / "safebeat" / "_version.py").read_text())
    assert version is not None
    assert (chart["version"], chart["appVersion"]) == ("0.1.0", version.group(1))


def test_notes_tell_what_was_installed() -> None:
    """NOTES.txt names the mode, the replicas, the Secret, the hook and how to check on beat."""
    standalone = notes(CHART, STANDALONE)
    assert "Deployment `rel-safebeat` of 2 replica(s)" in standalone
    assert "Secret `proj-safebeat`" in standalone
    assert "rel-safebeat-migrate" in standalone
    assert "exec deploy/rel-safebeat -c beat -- safebeat -A proj status" in standalone
    assert "GET /livez and /readyz on port 9809 (`beat-probes`)" in standalone
    sidecar = notes(CHART, SIDECAR_SERVICE_MONITOR)
    assert "sidecar in your application's pods" in sidecar
    assert "ServiceMonitor" in sidecar
    assert "PrometheusRule" in sidecar


def test_crd_kinds_are_the_only_ones_without_a_kubernetes_schema() -> None:
    """kubernetes-validate knows every kind the chart renders except the two Operator CRDs."""
    manifests = render(CHART, ci_values("all-features"))
    unknown = set()
    for manifest in manifests:
        try:
            kubernetes_validate.validate(manifest, KUBE_VERSIONS[-1], strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            unknown.add(manifest["kind"])
    assert unknown == CRD_KINDS


# --- `helm test` and chart-testing's `ct lint` ------------------------------------------------

CHART_TESTING = ROOT / "tests" / "chart" / "chart-testing"


def helm_test_pod(values: dict[str, Any]) -> dict[str, Any]:
    """The Pod the chart renders for `helm test`."""
    [pod] = [m for m in render(CHART, values) if m["kind"] == "Pod"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    return pod


@pytest.mark.parametrize("value_set", ["standalone", "sidecar"])
def test_helm_test_hook_runs_safebeat_health_any_with_beats_store(value_set: str) -> None:
    """`helm test` runs `safebeat -A <app> health --any` once, with beat's store and settings."""
    values = ci_values(value_set)
    pod = helm_test_pod(values)
    assert pod["spec"]["restartPolicy"] == "Never"
    assert "hook-succeeded" in pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
    [test] = pod["spec"]["containers"]
    assert test["command"] == ["safebeat", "-A", "proj", "health", "--any", "--max-age", "30s"]
    variables = env(test)
    assert variables["SAFEBEAT_URL"] == {
        "secretKeyRef": {
            "name": values["store"]["existingSecret"],
            "key": values["store"].get("secretKey", "url"),
        }
    }
    if value_set == "standalone":
        beat_env = env(beat(values))
        assert variables == {k: beat_env[k] for k in variables}


def test_helm_test_command_passes_on_a_heartbeat_from_another_pod(tmp_path: Path) -> None:
    """The hook's exact arguments pass when a beat on another host heartbeated, fail without."""
    url = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    command = helm_test_pod(merged(STANDALONE, {"app": "tests.chart.probe_app"}))["spec"][
        "containers"
    ][0]["command"]
    store = SqliteStore(url)
    store.migrate()
    nobody = CliRunner().invoke(safebeat_cli, command[1:], env={"SAFEBEAT_URL": url})
    assert nobody.exit_code == 1, nobody.output
    assert "on any host" in nobody.output
    store.heartbeat("probe-app", Replica("rel-safebeat-7d9f-abcde", 1, "t"), "0.1.0", {})
    store.close()
    alive = CliRunner().invoke(safebeat_cli, command[1:], env={"SAFEBEAT_URL": url})
    assert alive.exit_code == 0, alive.output
    assert "ok: rel-safebeat-7d9f-abcde" in alive.output


def test_chart_yaml_meets_chart_testings_schema_and_artifact_hub() -> None:
    """Chart.yaml passes `ct lint`'s schema and has maintainers, icon, kubeVersion and links."""
    schema = yamale.make_schema(str(CHART_TESTING / "chart_schema.yaml"))
    yamale.validate(schema, yamale.make_data(str(CHART / "Chart.yaml")))  # raises on a problem
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["maintainers"], "ct lint requires maintainers"
    assert chart["kubeVersion"] == f">={KUBE_VERSIONS[0]}.0-0"
    assert chart["icon"].startswith(chart["home"])
    assert (ROOT / chart["icon"].split("/raw/main/")[1]).is_file()
    links = yaml.safe_load(chart["annotations"]["artifacthub.io/links"])
    for link in links:
        assert link["url"].startswith(chart["home"]), link
        assert (ROOT / link["url"].split("/main/")[1]).exists(), link


def test_yaml_files_pass_chart_testings_yamllint() -> None:
    """Chart.yaml, values.yaml and every ci/ values file pass `ct lint`'s yamllint rules."""
    config = YamlLintConfig(file=str(CHART_TESTING / "lintconf.yaml"))
    files = [CHART / "Chart.yaml", CHART / "values.yaml", *sorted((CHART / "ci").glob("*.yaml"))]
    for path in files:
        problems = [
            f"{path.name}:{p.line}: {p.message}"
            for p in yamllint_linter.run(path.read_text(), config, str(path))
        ]
        assert problems == [], problems


def test_chart_testings_yamllint_rules_catch_a_bad_file() -> None:
    """The yamllint rules above do find problems: trailing spaces, a duplicated key."""
    config = YamlLintConfig(file=str(CHART_TESTING / "lintconf.yaml"))
    problems = list(yamllint_linter.run("name: a \nname: b\n", config))
    assert {p.rule for p in problems} >= {"trailing-spaces", "key-duplicates"}
