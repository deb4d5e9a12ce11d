"""kube-linter's default checks, applied by hand to rendered manifests.

kube-linter (https://docs.kubelinter.io/#/generated/checks) is a Go binary that isn't
installable here; these are the checks its documentation marks "Enabled by default", each
with the parameters it documents. An object waives a check with kube-linter's own annotation,
`ignore-check.kube-linter.io/<check>: <reason>`, which kube-linter honours too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

Manifest = dict[str, Any]
WAIVER = "ignore-check.kube-linter.io/"

#: Every check kube-linter enables by default (its generated checks list).
DEFAULT_CHECKS = (
    "dangling-service",
    "deprecated-service-account-field",
    "docker-sock",
    "drop-net-raw-capability",
    "duplicate-env-var",
    "env-var-secret",
    "host-ipc",
    "host-network",
    "host-pid",
    "invalid-target-ports",
    "job-ttl-seconds-after-finished",
    "latest-tag",
    "liveness-port",
    "mismatching-selector",
    "no-anti-affinity",
    "no-extensions-v1beta",
    "no-read-only-root-fs",
    "non-existent-service-account",
    "pdb-max-unavailable",
    "pdb-min-available",
    "pdb-unhealthy-pod-eviction-policy",
    "privilege-escalation-container",
    "privileged-container",
    "readiness-port",
    "run-as-non-root",
    "sensitive-host-mounts",
    "ssh-port",
    "startup-port",
    "unsafe-sysctls",
    "unset-cpu-requirements",
    "unset-memory-requirements",
)

_LATEST_BLOCKLIST = (r".*:(latest)$", r"^[^:]*$", r"(.*/[^:]+)$")
_SENSITIVE_DIRS = ("^/$", "^/boot$", "^/dev$", "^/etc$", "^/lib$", "^/proc$", "^/sys$", "^/usr$")
_UNSAFE_SYSCTLS = ("kernel.msg", "kernel.sem", "kernel.shm", "fs.mqueue.", "net.")
_IANA_SVC_NAME = re.compile(r"^(?=.*[a-z])(?!.*--)[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$")


@dataclass(frozen=True)
class Finding:
    check: str
    where: str  # kind/name
    message: str


def _where(manifest: Manifest) -> str:
    return f"{manifest['kind']}/{manifest['metadata']['name']}"


def pod_template(manifest: Manifest) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(labels, pod spec) of a deployment-like object, or None."""
    kind = manifest["kind"]
    if kind == "Pod":
        return manifest["metadata"].get("labels", {}), manifest["spec"]
    if kind in {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}:
        template = manifest["spec"]["template"]
        return template["metadata"].get("labels", {}), template["spec"]
    return None


def _containers(spec: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    yield from spec.get("initContainers", [])
    yield from spec.get("containers", [])


def _matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and selector.items() <= labels.items()


Check = Callable[[Manifest, list[Manifest]], Iterator[str]]


def _pod_checks(manifest: Manifest, everything: list[Manifest]) -> Iterator[tuple[str, str]]:
    """(check, message) of the checks that read a pod template."""
    found = pod_template(manifest)
    if found is None:
        return
    _, spec = found
    if spec.get("serviceAccount") and spec.get("serviceAccount") != spec.get("serviceAccountName"):
        yield "deprecated-service-account-field", "serviceAccount is set"
    account = spec.get("serviceAccountName", "")
    accounts = {m["metadata"]["name"] for m in everything if m["kind"] == "ServiceAccount"}
    if account not in {"", "default"} and account not in accounts:
        yield "non-existent-service-account", f"service account {account!r} not found"
    for name in ("hostIPC", "hostNetwork", "hostPID"):
        if spec.get(name):
            yield f"host-{name[4:].lower()}", f"{name} is true"
    for sysctl in spec.get("securityContext", {}).get("sysctls", []):
        if sysctl["name"].startswith(_UNSAFE_SYSCTLS):
            yield "unsafe-sysctls", f"sysctl {sysctl['name']}"
    host_paths = {
        v["name"]: v["hostPath"]["path"] for v in spec.get("volumes", []) if "hostPath" in v
    }
    pod_security = spec.get("securityContext", {})
    for container in _containers(spec):
        name = container["name"]
        for check, message in _container_checks(container, pod_security, host_paths):
            yield check, f"container {name!r}: {message}"


def _container_checks(
    container: Mapping[str, Any],
    pod_security: Mapping[str, Any],
    host_paths: Mapping[str, str],
) -> Iterator[tuple[str, str]]:
    security = container.get("securityContext", {})
    image = container.get("image", "")
    if any(re.search(pattern, image) for pattern in _LATEST_BLOCKLIST):
        yield "latest-tag", f"image {image!r} has no tag, or latest"
    if not security.get("readOnlyRootFilesystem"):
        yield "no-read-only-root-fs", "root filesystem is writable"
    if security.get("privileged"):
        yield "privileged-container", "privileged"
    if security.get("allowPrivilegeEscalation", True):
        yield "privilege-escalation-container", "allowPrivilegeEscalation is not false"
    non_root = security.get("runAsNonRoot", pod_security.get("runAsNonRoot"))
    user = security.get("runAsUser", pod_security.get("runAsUser"))
    if not (non_root or (user is not None and user > 0)) or user == 0:
        yield "run-as-non-root", "may run as root"
    capabilities = security.get("capabilities", {})
    dropped = set(capabilities.get("drop", []))
    if not dropped & {"NET_RAW", "ALL"} or "NET_RAW" in capabilities.get("add", []):
        yield "drop-net-raw-capability", "NET_RAW not dropped"
    names = [e["name"] for e in container.get("env", [])]
    for duplicate in sorted({n for n in names if names.count(n) > 1}):
        yield "duplicate-env-var", f"{duplicate} set twice"
    for variable in container.get("env", []):
        if re.match(r"(?i).*secret.*", variable["name"]) and variable.get("value"):
            yield "env-var-secret", f"{variable['name']} holds a value"
    resources = container.get("resources", {})
    if not resources.get("requests", {}).get("cpu"):
        yield "unset-cpu-requirements", "no CPU request"
    if not resources.get("limits", {}).get("memory"):
        yield "unset-memory-requirements", "no memory limit"
    ports = container.get("ports", [])
    exposed = {p.get("name") for p in ports} | {p["containerPort"] for p in ports}
    for port in ports:
        if port["containerPort"] == 22 and port.get("protocol", "TCP") == "TCP":
            yield "ssh-port", "exposes port 22"
        if "name" in port and not _IANA_SVC_NAME.match(port["name"]):
            yield "invalid-target-ports", f"port name {port['name']!r}"
    for probe, check in (
        ("livenessProbe", "liveness-port"),
        ("readinessProbe", "readiness-port"),
        ("startupProbe", "startup-port"),
    ):
        action = container.get(probe, {})
        target = action.get("httpGet", action.get("tcpSocket", action.get("grpc")))
        if target is not None and target["port"] not in exposed:
            yield check, f"{probe} on port {target['port']!r}, which is not exposed"
    for mount in container.get("volumeMounts", []):
        path = host_paths.get(mount["name"])
        if path is None:
            continue
        if path.endswith("docker.sock"):
            yield "docker-sock", f"mounts {path}"
        if any(re.search(d, path) for d in _SENSITIVE_DIRS):
            yield "sensitive-host-mounts", f"mounts {path}"


def _object_checks(manifest: Manifest, everything: list[Manifest]) -> Iterator[tuple[str, str]]:
    """(check, message) of the checks that read one object and the others it refers to."""
    kind, spec = manifest["kind"], manifest.get("spec", {})
    if manifest["apiVersion"].startswith("extensions/v1beta"):
        yield "no-extensions-v1beta", manifest["apiVersion"]
    templates = [t for m in everything if (t := pod_template(m)) is not None]
    if kind == "Service" and "selector" in spec:
        if not any(_matches(spec["selector"], labels) for labels, _ in templates):
            yield "dangling-service", "selects no pod of the render"
        for port in spec.get("ports", []):
            target = port.get("targetPort")
            if isinstance(target, str) and not _IANA_SVC_NAME.match(target):
                yield "invalid-target-ports", f"targetPort {target!r}"
    if kind == "Deployment":
        labels = spec["template"]["metadata"].get("labels", {})
        if not _matches(spec["selector"]["matchLabels"], labels):
            yield "mismatching-selector", "selector doesn't match the pod template"
        if spec.get("replicas", 1) >= 2 and not _anti_affinity(spec["template"]):
            yield "no-anti-affinity", "no inter-pod anti-affinity on kubernetes.io/hostname"
    if kind == "Job" and "ttlSecondsAfterFinished" not in spec:
        yield "job-ttl-seconds-after-finished", "no ttlSecondsAfterFinished"
    if kind == "PodDisruptionBudget":
        yield from _pdb_checks(spec, everything)


def _anti_affinity(template: Mapping[str, Any]) -> bool:
    anti = template["spec"].get("affinity", {}).get("podAntiAffinity", {})
    terms = [
        t["podAffinityTerm"]
        for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])
    ]
    terms += anti.get("requiredDuringSchedulingIgnoredDuringExecution", [])
    labels = template["metadata"].get("labels", {})
    return any(
        t.get("topologyKey") == "kubernetes.io/hostname"
        and _matches(t.get("labelSelector", {}).get("matchLabels", {}), labels)
        for t in terms
    )


def _pdb_checks(spec: Mapping[str, Any], everything: list[Manifest]) -> Iterator[tuple[str, str]]:
    if "unhealthyPodEvictionPolicy" not in spec:
        yield "pdb-unhealthy-pod-eviction-policy", "unhealthyPodEvictionPolicy not set"
    if spec.get("maxUnavailable") in (0, "0%"):
        yield "pdb-max-unavailable", "maxUnavailable 0 blocks every disruption"
    minimum = spec.get("minAvailable")
    if minimum is None:
        return
    if minimum == "100%":
        yield "pdb-min-available", "minAvailable 100% blocks every disruption"
    selector = spec["selector"]["matchLabels"]
    for m in everything:
        if m["kind"] != "Deployment" or not isinstance(minimum, int):
            continue
        labels = m["spec"]["template"]["metadata"].get("labels", {})
        if _matches(selector, labels) and minimum >= m["spec"].get("replicas", 1):
            yield "pdb-min-available", f"minAvailable {minimum} ≥ replicas"


def findings(manifests: list[Manifest]) -> list[Finding]:
    """Every default check that fails on `manifests`, waived or not."""
    found = []
    for manifest in manifests:
        for check, message in [
            *_object_checks(manifest, manifests),
            *_pod_checks(manifest, manifests),
        ]:
            assert check in DEFAULT_CHECKS, check
            found.append(Finding(check, _where(manifest), message))
    return found


def waivers(manifest: Manifest) -> dict[str, str]:
    """check -> reason, from an object's `ignore-check.kube-linter.io/*` annotations."""
    annotations = manifest["metadata"].get("annotations") or {}
    return {k.removeprefix(WAIVER): v for k, v in annotations.items() if k.startswith(WAIVER)}


def unwaived(manifests: list[Manifest]) -> list[Finding]:
    """The findings that no annotation of their object waives."""
    by_object = {_where(m): waivers(m) for m in manifests}
    return [f for f in findings(manifests) if f.check not in by_object[f.where]]
