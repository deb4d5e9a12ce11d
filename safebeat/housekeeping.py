"""Beat's chores besides dispatching: heartbeats of this replica, pruning old history."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta

from safebeat._version import __version__
from safebeat.config import Config
from safebeat.identity import Replica
from safebeat.metrics import BeatMetrics
from safebeat.stores.base import Store, TickStore

logger = logging.getLogger("safebeat.scheduler")


def heartbeat(
    store: Store,
    config: Config,
    replica: Replica,
    digests: Mapping[str, str],
    metrics: BeatMetrics,
    *,
    interval: float,
) -> None:
    """Record that this replica is alive with the entry digests it runs; where metrics are
    served, count the replicas whose heartbeat is less than three intervals old."""
    store.heartbeat(config.namespace, replica, __version__, digests)
    if metrics.recording:
        replicas = store.replicas(config.namespace)
        newest = max(r.heartbeat_at for r in replicas)
        alive_after = newest - timedelta(seconds=3 * interval)
        metrics.replicas_alive(sum(r.heartbeat_at >= alive_after for r in replicas))


def prune(store: TickStore, config: Config, now: datetime) -> None:
    """Delete history older than `safebeat_retention` (store time `now`) and expired keys."""
    deleted = store.prune(config.namespace, now - config.retention)
    if deleted:
        logger.info(
            "safebeat: pruned %d row(s): dispatches older than the retention, expired effect keys",
            deleted,
        )
