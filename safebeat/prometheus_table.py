"""Prometheus metrics defined from a table: one `Metric` a line (name, help, labels, kind),
so that a module's metrics read as a list and are all created the same way.
docs/metrics.md lists them; a test keeps that page and the tables in step."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_Kind = TypeVar("_Kind", Counter, Gauge, Histogram)

#: The label every safebeat metric names its namespace with. Not `namespace`: Prometheus's
#: Kubernetes discovery sets that to the pod's namespace, and the scraped value would be
#: renamed `exported_namespace`, merging two apps that share a Kubernetes namespace.
NAMESPACE = "safebeat_namespace"


def without_created_series() -> None:
    """Stop exporting a `_created` series beside each counter and histogram in this process.

    They double the series of every per-entry counter and no rule of ours reads them.
    """
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class Metric:
    """One metric: `options` are the kind's own (`buckets`, `multiprocess_mode`)."""

    name: str
    help: str
    labels: tuple[str, ...]
    kind: type[Counter] | type[Gauge] | type[Histogram]
    options: Mapping[str, Any] = field(default_factory=dict)


class Metrics:
    """The metrics of a table, created in `registry` (None: in multiprocess mode, where
    values live in files), looked up by name and kind."""

    def __init__(self, table: Iterable[Metric], registry: CollectorRegistry | None) -> None:
        self._created = {
            m.name: m.kind(m.name, m.help, list(m.labels), registry=registry, **m.options)
            for m in table
        }

    def inc(self, name: str, *labels: str, amount: float = 1) -> None:
        """Add `amount` to counter `name` of `labels`."""
        self._of(name, Counter).labels(*labels).inc(amount)

    def set(self, name: str, value: float, *labels: str) -> None:
        """Set gauge `name` of `labels` to `value`."""
        self._of(name, Gauge).labels(*labels).set(value)

    def observe(self, name: str, value: float, *labels: str) -> None:
        """Add `value` to histogram `name` of `labels`."""
        self._of(name, Histogram).labels(*labels).observe(value)

    def remove(self, name: str, *labels: str) -> None:
        """Drop the series of `labels` of metric `name` (it is served no more)."""
        self._created[name].remove(*labels)

    def start_at_zero(self, name: str, *labels: str) -> None:
        """Create the series of `labels` before its first event, so a rate() works."""
        self._created[name].labels(*labels)

    def _of(self, name: str, kind: type[_Kind]) -> _Kind:
        created = self._created[name]
        if not isinstance(created, kind):
            raise TypeError(f"{name} is a {type(created).__name__}, not a {kind.__name__}")
        return created
