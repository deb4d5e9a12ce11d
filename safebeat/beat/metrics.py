"""Prometheus metrics of one beat replica, served on `safebeat_metrics_port`.

Every metric carries the `safebeat_namespace` label; per-entry metrics carry `entry`. No
counter carries the replica's id (a new series per entry at every restart): join on
`safebeat_replica_info` for it. The names and their meaning are listed in docs/metrics.md,
and a test keeps that table and this module in step. Each replica exports what it did
itself: sum across replicas (`sum by (entry)`) for the cluster's view.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from safebeat._version import __version__
from safebeat.listening import any_address, serve_registry, shown
from safebeat.prometheus_table import NAMESPACE, Metric, Metrics, without_created_series

logger = logging.getLogger("safebeat.metrics")

#: Seconds between a window and its publish: from "on time" to "a broker outage late".
LAG_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600)
TICK_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


@dataclass
class BeatTotals:
    """What this replica did since it started, counted always (a few integers).

    The same events feed the Prometheus series, which are recorded only while served.
    """

    ticks: int = 0
    ticks_succeeded: int = 0
    lock_busy: int = 0
    claimed: int = 0  # windows this replica claimed (re-publishes not included)
    dispatched: int = 0  # of those, published (safebeat_dispatches)
    republished: int = 0
    skipped_windows: int = 0
    publish_errors: int = 0
    store_errors: int = 0
    entry_errors: int = 0


BEAT_METRICS = (
    Metric(
        "safebeat_replica_info",
        "Always 1: this replica's id, safebeat version and store (password hidden).",
        (NAMESPACE, "replica", "version", "store"),
        Gauge,
    ),
    Metric(
        "safebeat_dispatches",
        "Windows this replica claimed and published (re-publishes not included).",
        (NAMESPACE, "entry"),
        Counter,
    ),
    Metric(
        "safebeat_republished",
        "Claims left unsent past safebeat_claim_timeout, or windows whose run died, that "
        "this replica re-published.",
        (NAMESPACE, "entry"),
        Counter,
    ),
    Metric(
        "safebeat_windows_skipped",
        "Windows not dispatched, by policy: "
        "missed, late, catchup_limit, overlap, paused, calendar.",
        (NAMESPACE, "entry", "reason"),
        Counter,
    ),
    Metric(
        "safebeat_publish_errors",
        "Publishes that failed: kind is broker (left unsent, re-published) or message "
        "(recorded failed).",
        (NAMESPACE, "kind"),
        Counter,
    ),
    Metric(
        "safebeat_dispatch_lag_seconds",
        "Seconds from a window to its publish by this replica (store clock).",
        (NAMESPACE,),
        Histogram,
        {"buckets": LAG_BUCKETS},
    ),
    Metric(
        "safebeat_tick_duration_seconds",
        "Seconds one tick took: lock, plan, claim, publish and record.",
        (NAMESPACE,),
        Histogram,
        {"buckets": TICK_BUCKETS},
    ),
    Metric(
        "safebeat_ticks_succeeded",
        "Ticks that finished without an error (a tick that found the lock busy included).",
        (NAMESPACE,),
        Counter,
    ),
    Metric(
        "safebeat_tick_lock_busy",
        "Ticks that found another replica holding the tick lock (retried shortly).",
        (NAMESPACE,),
        Counter,
    ),
    Metric(
        "safebeat_store_errors",
        "Store calls that failed: kind is unavailable (retried with backoff), error, or "
        "tick_too_long (the store ended a tick that outlasted the lock timeout).",
        (NAMESPACE, "kind"),
        Counter,
    ),
    Metric(
        "safebeat_entry_errors",
        "Malformed entries at startup, and errors computing an entry's windows.",
        (NAMESPACE, "entry"),
        Counter,
    ),
    Metric(
        "safebeat_entry_broken",
        "1 while this replica puts the entry aside: its definition does not load, the "
        "store refuses its rows, or its state does not read back.",
        (NAMESPACE, "entry"),
        Gauge,
    ),
    Metric(
        "safebeat_replicas_alive",
        "Replicas of this namespace whose heartbeat is recent, as this replica sees it.",
        (NAMESPACE,),
        Gauge,
    ),
    Metric(
        "safebeat_claims_left_unsent",
        "Claims this replica could not publish (broker unreachable); another pass "
        "re-publishes them after safebeat_claim_timeout.",
        (NAMESPACE,),
        Gauge,
    ),
    Metric(
        "safebeat_entries",
        "Entries this replica schedules (valid ones; broken ones are entry errors).",
        (NAMESPACE,),
        Gauge,
    ),
    Metric(
        "safebeat_runtime_entries",
        "Of those, the entries added at run time (safebeat.schedules, safebeat schedule).",
        (NAMESPACE,),
        Gauge,
    ),
)


class BeatMetrics:
    """The one place a beat replica counts what it does; `serve` exposes it over HTTP.

    `totals` always counts. The Prometheus series are recorded only once `serve` was
    called: with no metrics port, a replica of 100,000 entries would otherwise keep about
    300 MB of per-entry series nobody reads.
    """

    def __init__(self, namespace: str, replica: str, store: str) -> None:
        self.namespace = namespace
        self.recording = False
        self.totals = BeatTotals()
        #: The entries put aside, by cause (a definition, the store): served as one set.
        self._set_aside: dict[str, frozenset[str]] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        self._metrics = Metrics(BEAT_METRICS, self.registry)
        self._metrics.set("safebeat_replica_info", 1, namespace, replica, __version__, store)
        for kind in ("broker", "message"):
            self._metrics.start_at_zero("safebeat_publish_errors", namespace, kind)
        for kind in ("unavailable", "error", "tick_too_long"):
            self._metrics.start_at_zero("safebeat_store_errors", namespace, kind)
        for name in (
            "safebeat_tick_lock_busy",
            "safebeat_ticks_succeeded",
            "safebeat_dispatch_lag_seconds",
            "safebeat_tick_duration_seconds",
            "safebeat_claims_left_unsent",
        ):
            self._metrics.start_at_zero(name, namespace)

    def serve(self, port: int, address: str | None = None) -> None:
        """Expose the metrics at http://address:port/metrics, in a daemon thread (by
        default on every address, IPv6 and IPv4: `safebeat.listening`)."""
        address = any_address() if address is None else address
        without_created_series()
        serve_registry(self.registry, port, address)
        self.recording = True
        for entry in self.broken_now():
            self._set("safebeat_entry_broken", 1, entry)
        logger.info("safebeat: metrics on http://%s/metrics", shown(address, port))

    def _inc(self, name: str, *labels: str, amount: float = 1) -> None:
        if self.recording:
            self._metrics.inc(name, self.namespace, *labels, amount=amount)

    def _set(self, name: str, value: float, *labels: str) -> None:
        if self.recording:
            self._metrics.set(name, value, self.namespace, *labels)

    def entries(self, count: int) -> None:
        self._set("safebeat_entries", count)

    def runtime_entries(self, count: int) -> None:
        self._set("safebeat_runtime_entries", count)

    def dispatched(self, entry: str, window: datetime, published: datetime) -> None:
        self.totals.dispatched += 1
        if not self.recording:
            return
        lag = max(0.0, (published - window).total_seconds())
        self._inc("safebeat_dispatches", entry)
        self._metrics.observe("safebeat_dispatch_lag_seconds", lag, self.namespace)

    def claimed(self, count: int) -> None:
        self.totals.claimed += count

    def republished(self, entry: str) -> None:
        self.totals.republished += 1
        self._inc("safebeat_republished", entry)

    def skipped(self, entry: str, reason: str, count: int) -> None:
        self.totals.skipped_windows += count
        self._inc("safebeat_windows_skipped", entry, reason, amount=count)

    def publish_failed(self, kind: str, count: int = 1) -> None:
        self.totals.publish_errors += count
        self._inc("safebeat_publish_errors", kind, amount=count)

    def tick(self, seconds: float, *, succeeded: bool) -> None:
        self.totals.ticks += 1
        self.totals.ticks_succeeded += succeeded
        if succeeded:
            self._inc("safebeat_ticks_succeeded")
        if self.recording:
            self._metrics.observe("safebeat_tick_duration_seconds", seconds, self.namespace)

    def lock_busy(self) -> None:
        self.totals.lock_busy += 1
        self._inc("safebeat_tick_lock_busy")

    def store_error(self, kind: str) -> None:
        self.totals.store_errors += 1
        self._inc("safebeat_store_errors", kind)

    def entry_error(self, entry: str) -> None:
        self.totals.entry_errors += 1
        self._inc("safebeat_entry_errors", entry)

    def broken_now(self) -> frozenset[str]:
        """The entries this replica puts aside now, whatever the cause."""
        return frozenset().union(*self._set_aside.values())

    def set_aside(self, cause: str, entries: Iterable[str]) -> None:
        """`entries` are exactly those put aside for `cause` now: `safebeat_entry_broken`
        is 1 for each entry put aside for any cause, and absent for the others. Unlike
        `safebeat_entry_errors_total`, counted once per problem, it lasts as long as the
        problem, so an alert on it stays until the entry is fixed."""
        before = self.broken_now()
        self._set_aside[cause] = frozenset(entries)
        now = self.broken_now()
        if not self.recording:
            return
        for entry in before - now:
            self._metrics.remove("safebeat_entry_broken", self.namespace, entry)
        for entry in now - before:
            self._set("safebeat_entry_broken", 1, entry)

    def replicas_alive(self, count: int) -> None:
        self._set("safebeat_replicas_alive", count)

    def claims_left_unsent(self, count: int) -> None:
        self._set("safebeat_claims_left_unsent", count)
