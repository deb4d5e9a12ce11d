"""Render charts with Helm's Go SDK and validate manifests against Kubernetes' schemas, offline.

helm-python-sdk binds Helm's own Go code (render, lint, schema checks, dependency update),
so no `helm` binary or cluster is needed; kubernetes-validate ships the OpenAPI schemas of
every Kubernetes release it knows. Neither touches the network here.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "safebeat"
EXAMPLE = ROOT / "examples" / "helm-app"

#: The oldest Kubernetes release the chart supports (the PodDisruptionBudget's
#: unhealthyPodEvictionPolicy is on by default from 1.27), and the newest whose schemas
#: kubernetes-validate ships.
KUBE_VERSIONS = ("1.27", kubernetes_validate.latest_version())

#: Kinds of the Prometheus Operator, which kubernetes-validate has no schema for.
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}

Manifest = dict[str, Any]


def ci_values(name: str) -> dict[str, Any]:
    """A values file of the chart's `ci/` folder (the value sets `ct lint` would use too)."""
    loaded: dict[str, Any] = yaml.safe_load((CHART / "ci" / f"{name}-values.yaml").read_text())
    return loaded


def merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `override` merged in, key by key, as Helm merges values files."""
    result = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


Values = Mapping[str, Any] | None


def render_raw(chart: Path, values: Values, release: str = "rel") -> dict[str, str]:
    """Template path -> rendered text, as `helm template` produces them."""
    with helm.Chart.load(chart) as loaded:
        return loaded.render(
            None if values is None else dict(values),
            name=release,
            namespace="apps",
            is_install=True,
        )


def render(chart: Path, values: Values, release: str = "rel") -> list[Manifest]:
    """Every manifest the chart renders (hooks included), NOTES.txt left out."""
    manifests: list[Manifest] = []
    for path, text in sorted(render_raw(chart, values, release).items()):
        if path.endswith("NOTES.txt"):
            continue
        manifests.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return manifests


def notes(chart: Path, values: Values, release: str = "rel") -> str:
    """The chart's rendered NOTES.txt."""
    rendered = render_raw(chart, values, release)
    return next(text for path, text in rendered.items() if path.endswith("/NOTES.txt"))


def one(manifests: list[Manifest], kind: str) -> Manifest:
    """The single manifest of `kind`."""
    found = [m for m in manifests if m["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {[m['metadata']['name'] for m in found]}"
    return found[0]


def kinds(manifests: list[Manifest]) -> list[str]:
    return sorted(m["kind"] for m in manifests)


def container(pod_spec: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The container `name` of a pod spec."""
    return next(c for c in pod_spec["containers"] if c["name"] == name)


def env(container_spec: Mapping[str, Any]) -> dict[str, Any]:
    """A container's environment: name -> value, or the `valueFrom` mapping."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container_spec.get("env", [])}


def pod_specs(manifests: list[Manifest]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind/name, pod spec) of every Deployment, Job and Pod (the `helm test` hook)."""
    for m in manifests:
        where = f"{m['kind']}/{m['metadata']['name']}"
        if m["kind"] in {"Deployment", "Job"}:
            yield where, m["spec"]["template"]["spec"]
        elif m["kind"] == "Pod":
            yield where, m["spec"]


def lint(chart: Path, values: Values) -> list[str]:
    """`helm lint --strict` findings, subcharts too; only an example chart may lack an icon."""
    report = helm.lint(
        chart, None if values is None else dict(values), strict=True, with_subcharts=True
    )
    findings = [f"{m['path']}: {m['error']}" for m in report["messages"]]
    findings += report["errors"]
    if chart.resolve() == CHART:
        return findings
    return [f for f in findings if not f.endswith("icon is recommended")]


def validate(manifest: Manifest, kube_version: str) -> None:
    """Check a manifest against Kubernetes' schema (strict: unknown fields are errors).

    Prometheus Operator kinds have no schema in kubernetes-validate; they are checked
    against the fields of their CRDs that the chart uses (`CRD_SCHEMAS`).
    """
    if manifest["kind"] in CRD_KINDS:
        assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
        jsonschema.validate(manifest, CRD_SCHEMAS[manifest["kind"]])
        return
    kubernetes_validate.validate(manifest, kube_version, strict=True)


# The fields of the Prometheus Operator CRDs (monitoring.coreos.com/v1) that the chart sets,
# with the types and the duration pattern the CRDs give them. Stricter than the CRDs: any
# other field is an error here, so a typo can't pass.
_DURATION = (
    "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_METADATA = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": _NAME, "maxLength": 63},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
    },
}


#: A RelabelConfig, with the fields and actions of the CRDs.
_RELABELINGS = {
    "type": "array",
    "items": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "sourceLabels": {"type": "array", "items": {"type": "string"}},
            "separator": {"type": "string"},
            "targetLabel": {"type": "string"},
            "regex": {"type": "string"},
            "modulus": {"type": "integer"},
            "replacement": {"type": "string"},
            "action": {
                "enum": [
                    *("replace", "keep", "drop", "hashmod", "labelmap", "labeldrop"),
                    *("labelkeep", "lowercase", "uppercase", "keepequal", "dropequal"),
                ]
            },
        },
    },
}


def _endpoints(port_field: str) -> dict[str, Any]:
    """`endpoints` of a ServiceMonitor, `podMetricsEndpoints` of a PodMonitor."""
    return {
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "additionalProperties": False,
            "required": [port_field],
            "properties": {
                port_field: {"type": "string"},
                "path": {"type": "string"},
                "interval": {"type": "string", "pattern": _DURATION},
                "scrapeTimeout": {"type": "string", "pattern": _DURATION},
                "relabelings": _RELABELINGS,
                "metricRelabelings": _RELABELINGS,
            },
        },
    }


def _monitor(endpoints_field: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["selector", endpoints_field],
        "additionalProperties": False,
        "properties": {
            "selector": {
                "type": "object",
                "additionalProperties": False,
                "required": ["matchLabels"],
                "properties": {"matchLabels": _STRING_MAP},
            },
            "namespaceSelector": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
            },
            endpoints_field: _endpoints("port"),
        },
    }


def _crd(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": spec,
        },
    }


CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": _crd("ServiceMonitor", _monitor("endpoints")),
    "PodMonitor": _crd("PodMonitor", _monitor("podMetricsEndpoints")),
    "PrometheusRule": _crd(
        "PrometheusRule",
        {
            "type": "object",
            "required": ["groups"],
            "additionalProperties": False,
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "rules"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["alert", "expr"],
                                    "additionalProperties": False,
                                    "properties": {
                                        "alert": {"type": "string"},
                                        "expr": {"type": ["string", "integer"]},
                                        "for": {"type": "string", "pattern": _DURATION},
                                        "labels": _STRING_MAP,
                                        "annotations": _STRING_MAP,
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    ),
}
