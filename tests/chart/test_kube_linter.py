"""The rendered chart meets kube-linter's default checks, or waives one with its reason.

The checks are applied by hand (tests/chart/kube_linter.py); the properties they stand for
are asserted by name below too, so that a check weakened by mistake still leaves them tested.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.chart import kube_linter
from tests.chart.rendering import CHART, ci_values, container, merged, one, pod_specs, render

VALUE_SETS = ("standalone", "all-features", "sidecar", "no-migrate")
WORKER_MONITOR = {
    "podMonitor": {"enabled": True, "podSelector": {"app.kubernetes.io/name": "worker"}}
}
#: The sidecars scraped through a ServiceMonitor (and its metrics Service), or a PodMonitor.
SIDECAR_MONITORING = {
    "safebeat": {"metrics": {"serviceMonitor": {"enabled": True}}, "workerMetrics": WORKER_MONITOR}
}
SIDECAR_POD_MONITORING = {
    "safebeat": {"metrics": {"podMonitor": {"enabled": True}}, "workerMetrics": WORKER_MONITOR}
}


@pytest.mark.parametrize("value_set", [*VALUE_SETS, "sidecar-service-monitor"])
def test_every_default_check_passes_or_is_waived(value_set: str) -> None:
    """No default check fails unwaived on the chart rendered with each ci/ value set."""
    assert kube_linter.unwaived(render(CHART, value_set_values(value_set))) == []


@pytest.mark.parametrize(
    "values",
    [None, SIDECAR_MONITORING, SIDECAR_POD_MONITORING],
    ids=["plain", "service-monitor", "pod-monitor"],
)
def test_the_sidecar_example_passes_every_default_check(
    example_chart: Path, values: dict[str, Any] | None
) -> None:
    """examples/helm-app, beat sidecars included, fails no default check, waiving none."""
    manifests = render(example_chart, values)
    assert kube_linter.findings(manifests) == []


# The waivers, each with the reason a reader of the manifest sees.
EXPECTED_WAIVERS = {
    "standalone": {"Deployment/rel-safebeat": {"no-anti-affinity"}},
    "no-migrate": {"Deployment/rel-safebeat": {"no-anti-affinity"}},
    "all-features": {
        "Deployment/rel-safebeat": {"no-anti-affinity", "non-existent-service-account"},
        "Job/rel-safebeat-migrate": {"non-existent-service-account"},
        "Pod/rel-safebeat-test-health": {"non-existent-service-account"},
    },
    "sidecar": {},
    "sidecar-service-monitor": {"Service/rel-safebeat-metrics": {"dangling-service"}},
}


def value_set_values(name: str) -> dict[str, Any]:
    """A ci/ value set, or sidecar mode scraped through a ServiceMonitor and its Service."""
    if name == "sidecar-service-monitor":
        monitors = {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": False}}
        return merged(ci_values("sidecar"), {"metrics": monitors})
    return ci_values(name)


@pytest.mark.parametrize("value_set", [*VALUE_SETS, "sidecar-service-monitor"])
def test_waivers_are_few_and_each_gives_its_reason(value_set: str) -> None:
    """Only the expected objects waive checks, only default ones, each with a reason."""
    manifests = render(CHART, value_set_values(value_set))
    waived = {}
    for manifest in manifests:
        waivers = kube_linter.waivers(manifest)
        if waivers:
            waived[f"{manifest['kind']}/{manifest['metadata']['name']}"] = set(waivers)
        for check, reason in waivers.items():
            assert check in kube_linter.DEFAULT_CHECKS, check
            assert len(reason.split()) >= 8, (check, reason)
    assert waived == EXPECTED_WAIVERS[value_set]


def test_a_waiver_is_dropped_when_its_cause_is() -> None:
    """With a podAntiAffinity of the user's, the Deployment waives nothing and passes."""
    anti_affinity = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "beat"}},
                    },
                }
            ]
        }
    }
    manifests = render(CHART, merged(ci_values("standalone"), {"affinity": anti_affinity}))
    assert kube_linter.waivers(one(manifests, "Deployment")) == {}
    assert kube_linter.findings(manifests) == []


# --- the properties, by name ------------------------------------------------------------------


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_every_container_is_locked_down_and_sized(value_set: str) -> None:
    """Non-root, read-only root, no escalation, NET_RAW dropped, CPU request and memory limit,
    a pinned image, in every pod the chart renders."""
    for where, spec in pod_specs(render(CHART, ci_values(value_set))):
        assert not any(spec.get(h) for h in ("hostNetwork", "hostPID", "hostIPC")), where
        assert all("hostPath" not in v for v in spec.get("volumes", [])), where
        for c in spec["containers"]:
            security = c["securityContext"]
            assert security["runAsNonRoot"] is True, where
            assert security["readOnlyRootFilesystem"] is True, where
            assert security["allowPrivilegeEscalation"] is False, where
            assert not security.get("privileged"), where
            assert "ALL" in security["capabilities"]["drop"], where
            assert c["resources"]["requests"]["cpu"], where
            assert c["resources"]["limits"]["memory"], where
            assert ":" in c["image"].rsplit("/", 1)[-1], where
            assert not c["image"].endswith(":latest"), where


@pytest.mark.parametrize("value_set", ["standalone", "all-features", "no-migrate"])
def test_standalone_beats_have_every_probe_on_an_exposed_port(value_set: str) -> None:
    """Startup, liveness and readiness probes are present, each on a declared container port."""
    deployment = one(render(CHART, ci_values(value_set)), "Deployment")
    beat = container(deployment["spec"]["template"]["spec"], "beat")
    exposed = {p["name"] for p in beat["ports"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert beat[probe]["httpGet"]["port"] in exposed, probe


def test_the_pdb_never_blocks_a_drain() -> None:
    """The PDB sets AlwaysAllow, and a maxUnavailable or minAvailable that lets a pod go."""
    for value_set in ("standalone", "all-features"):
        manifests = render(CHART, ci_values(value_set))
        pdb = one(manifests, "PodDisruptionBudget")["spec"]
        replicas = one(manifests, "Deployment")["spec"]["replicas"]
        assert pdb["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
        assert pdb.get("maxUnavailable", 1) >= 1
        assert pdb.get("minAvailable", 0) < replicas


def test_the_migration_job_is_cleaned_up() -> None:
    """The migration Job sets ttlSecondsAfterFinished, so a failed one does not stay forever."""
    job = one(render(CHART, ci_values("standalone")), "Job")
    assert job["spec"]["ttlSecondsAfterFinished"] == 86400


# --- the checks catch what they are for -------------------------------------------------------


def _broken(manifests: list[dict[str, Any]], kind: str, change: Any) -> list[dict[str, Any]]:
    changed = copy.deepcopy(manifests)
    change(one(changed, kind))
    return changed


def _beat(deployment: dict[str, Any]) -> dict[str, Any]:
    return container(deployment["spec"]["template"]["spec"], "beat")


BREAKAGES = {
    "pdb-unhealthy-pod-eviction-policy": (
        "PodDisruptionBudget",
        lambda m: m["spec"].pop("unhealthyPodEvictionPolicy"),
    ),
    "pdb-min-available": ("PodDisruptionBudget", lambda m: m["spec"].update(minAvailable=2)),
    "latest-tag": ("Deployment", lambda m: _beat(m).update(image="registry.example.com/proj")),
    "no-read-only-root-fs": (
        "Deployment",
        lambda m: _beat(m)["securityContext"].pop("readOnlyRootFilesystem"),
    ),
    "run-as-non-root": ("Deployment", lambda m: _beat(m)["securityContext"].update(runAsUser=0)),
    "unset-cpu-requirements": ("Deployment", lambda m: _beat(m)["resources"].pop("requests")),
    "unset-memory-requirements": ("Deployment", lambda m: _beat(m)["resources"].pop("limits")),
    "liveness-port": ("Deployment", lambda m: _beat(m)["livenessProbe"]["httpGet"].update(port=1)),
    "readiness-port": ("Deployment", lambda m: _beat(m).pop("ports")),
    "job-ttl-seconds-after-finished": ("Job", lambda m: m["spec"].pop("ttlSecondsAfterFinished")),
    "duplicate-env-var": (
        "Deployment",
        lambda m: _beat(m)["env"].append({"name": "SAFEBEAT_PROBE_PORT", "value": "1"}),
    ),
}


@pytest.mark.parametrize("check", sorted(BREAKAGES))
def test_a_check_finds_the_breakage_it_is_for(check: str) -> None:
    """Each check, handed a manifest broken its way, reports exactly that check."""
    manifests = render(CHART, ci_values("standalone"))
    kind, change = BREAKAGES[check]
    found = {f.check for f in kube_linter.unwaived(_broken(manifests, kind, change))}
    assert check in found
