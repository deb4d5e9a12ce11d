"""Prometheus metrics of one beat replica, served on `safebeat_metrics_port`.

Every metric carries the `namespace` label; per-entry metrics carry `entry`. The names
and their meaning are listed in docs/metrics.md, and a test keeps that table and this
module in step. Each replica exports what it did itself: sum across replicas (`sum by
(entry)`) for the cluster's view.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from safebeat._version import __version__

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
    lock_busy: int = 0
    claimed: int = 0  # windows this replica claimed (re-publishes not included)
    dispatched: int = 0  # of those, published (safebeat_dispatches)
    republished: int = 0
    skipped_windows: int = 0
    publish_errors: int = 0
    store_errors: int = 0
    entry_errors: int = 0


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
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._info = Gauge(
            "safebeat_replica_info",
            "Always 1: this replica's id, safebeat version and store (password hidden).",
            ["namespace", "replica", "version", "store"],
            registry=r,
        )
        self._info.labels(namespace, replica, __version__, store).set(1)
        self._dispatches = Counter(
            "safebeat_dispatches",
            "Windows this replica claimed and published (re-publishes not included).",
            ["namespace", "entry", "replica"],
            registry=r,
        )
        self._replica = replica
        self._republished = Counter(
            "safebeat_republished",
            "Claims left unsent past safebeat_claim_timeout, or windows whose run died, that "
            "this replica re-published.",
            ["namespace", "entry"],
            registry=r,
        )
        self._skipped = Counter(
            "safebeat_windows_skipped",
            "Windows not dispatched, by policy: "
            "missed, late, catchup_limit, overlap, paused, calendar.",
            ["namespace", "entry", "reason"],
            registry=r,
        )
        self._publish_errors = Counter(
            "safebeat_publish_errors",
            "Publishes that failed: kind is broker (left unsent, re-published) or message "
            "(recorded failed).",
            ["namespace", "kind"],
            registry=r,
        )
        self._lag = Histogram(
            "safebeat_dispatch_lag_seconds",
            "Seconds from a window to its publish by this replica (store clock).",
            ["namespace"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self._last_lag = Gauge(
            "safebeat_last_dispatch_lag_seconds",
            "Lag of the latest window of each entry this replica published.",
            ["namespace", "entry"],
            registry=r,
        )
        self._last_window = Gauge(
            "safebeat_last_dispatch_window_timestamp_seconds",
            "The latest window of each entry this replica published (Unix time).",
            ["namespace", "entry"],
            registry=r,
        )
        self._ticks = Histogram(
            "safebeat_tick_duration_seconds",
            "Seconds one tick took: lock, plan, claim, publish and record.",
            ["namespace"],
            buckets=TICK_BUCKETS,
            registry=r,
        )
        self._busy = Counter(
            "safebeat_tick_lock_busy",
            "Ticks that found another replica holding the tick lock (retried shortly).",
            ["namespace"],
            registry=r,
        )
        self._store_errors = Counter(
            "safebeat_store_errors",
            "Store calls that failed: kind is unavailable (retried with backoff), error, or "
            "tick_too_long (the store ended a tick that outlasted the lock timeout).",
            ["namespace", "kind"],
            registry=r,
        )
        self._entry_errors = Counter(
            "safebeat_entry_errors",
            "Malformed entries at startup, and errors computing an entry's windows.",
            ["namespace", "entry"],
            registry=r,
        )
        self._replicas = Gauge(
            "safebeat_replicas_alive",
            "Replicas of this namespace whose heartbeat is recent, as this replica sees it.",
            ["namespace"],
            registry=r,
        )
        self._left_unsent = Gauge(
            "safebeat_claims_left_unsent",
            "Claims this replica could not publish (broker unreachable); another pass "
            "re-publishes them after safebeat_claim_timeout.",
            ["namespace"],
            registry=r,
        )
        self._period = Gauge(
            "safebeat_entry_period_seconds",
            "The time between an entry's windows (for crontab and solar entries: the gap "
            "between its next two windows at startup).",
            ["namespace", "entry"],
            registry=r,
        )
        self._entries = Gauge(
            "safebeat_entries",
            "Entries this replica schedules (valid ones; broken ones are entry errors).",
            ["namespace"],
            registry=r,
        )
        self._runtime_entries = Gauge(
            "safebeat_runtime_entries",
            "Of those, the entries added at run time (safebeat.schedules, safebeat schedule).",
            ["namespace"],
            registry=r,
        )

        # Known label sets start at zero, so a rate() works before the first event.
        for kind in ("broker", "message"):
            self._publish_errors.labels(namespace, kind)
        for kind in ("unavailable", "error", "tick_too_long"):
            self._store_errors.labels(namespace, kind)
        for metric in (self._busy, self._lag, self._ticks, self._left_unsent):
            metric.labels(namespace)

    def serve(self, port: int, address: str = "0.0.0.0") -> None:  # noqa: S104 - a pod's port
        """Expose the metrics at http://address:port/metrics, in a daemon thread."""
        start_http_server(port, addr=address, registry=self.registry)
        self.recording = True
        logger.info("safebeat: metrics on http://%s:%d/metrics", address, port)

    def entries(self, count: int) -> None:
        if not self.recording:
            return
        self._entries.labels(self.namespace).set(count)

    def runtime_entries(self, count: int) -> None:
        if not self.recording:
            return
        self._runtime_entries.labels(self.namespace).set(count)

    def dispatched(self, entry: str, window: datetime, published: datetime) -> None:
        self.totals.dispatched += 1
        if not self.recording:
            return
        lag = max(0.0, (published - window).total_seconds())
        self._dispatches.labels(self.namespace, entry, self._replica).inc()
        self._lag.labels(self.namespace).observe(lag)
        self._last_lag.labels(self.namespace, entry).set(lag)
        self._last_window.labels(self.namespace, entry).set(
            window.astimezone(timezone.utc).timestamp()
        )

    def claimed(self, count: int) -> None:
        self.totals.claimed += count

    def republished(self, entry: str) -> None:
        self.totals.republished += 1
        if not self.recording:
            return
        self._republished.labels(self.namespace, entry).inc()

    def skipped(self, entry: str, reason: str, count: int) -> None:
        self.totals.skipped_windows += count
        if not self.recording:
            return
        self._skipped.labels(self.namespace, entry, reason).inc(count)

    def publish_failed(self, kind: str, count: int = 1) -> None:
        self.totals.publish_errors += count
        if not self.recording:
            return
        self._publish_errors.labels(self.namespace, kind).inc(count)

    def tick(self, seconds: float) -> None:
        self.totals.ticks += 1
        if not self.recording:
            return
        self._ticks.labels(self.namespace).observe(seconds)

    def lock_busy(self) -> None:
        self.totals.lock_busy += 1
        if not self.recording:
            return
        self._busy.labels(self.namespace).inc()

    def store_error(self, kind: str) -> None:
        self.totals.store_errors += 1
        if not self.recording:
            return
        self._store_errors.labels(self.namespace, kind).inc()

    def entry_error(self, entry: str) -> None:
        self.totals.entry_errors += 1
        if not self.recording:
            return
        self._entry_errors.labels(self.namespace, entry).inc()

    def replicas_alive(self, count: int) -> None:
        if not self.recording:
            return
        self._replicas.labels(self.namespace).set(count)

    def claims_left_unsent(self, count: int) -> None:
        if not self.recording:
            return
        self._left_unsent.labels(self.namespace).set(count)

    def entry_period(self, entry: str, seconds: float) -> None:
        if not self.recording:
            return
        self._period.labels(self.namespace, entry).set(seconds)
