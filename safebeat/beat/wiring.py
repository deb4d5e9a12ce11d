"""Beat's parts, built and wired together for one tick engine.

`safebeat.beat.engine.TickEngine` runs the ticks with these; each part gets what it shares
with the others (the store, the config, this replica, the metrics, the clock) here, once.
Building them is pure: nothing here touches the store or the broker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from safebeat.beat.batching import ClaimBatch
from safebeat.beat.claim_round import ClaimRounds
from safebeat.beat.dispatch import Dispatcher
from safebeat.beat.guard import TickGuard
from safebeat.beat.housekeeping import Housekeeper
from safebeat.beat.metrics import BeatMetrics
from safebeat.beat.pacing import Pacing
from safebeat.beat.probes import ProbeState, default_liveness_timeout
from safebeat.beat.runtime_entry_watch import RuntimeWatch
from safebeat.config import Config, url_origin
from safebeat.identity import Replica
from safebeat.store_urls import redact
from safebeat.stores import Store


@dataclass(frozen=True)
class BeatParts:
    """One engine's parts, sharing one store, config, replica, metrics and clock."""

    metrics: BeatMetrics
    probes: ProbeState
    pacing: Pacing
    runtime: RuntimeWatch
    dispatcher: Dispatcher
    rounds: ClaimRounds
    chores: Housekeeper
    guard: TickGuard


def wire_parts(
    config: Config,
    replica: Replica,
    dispatcher: Dispatcher,
    *,
    store: Callable[[], Store],
    monotonic: Callable[[], float],
    batch: ClaimBatch,
    max_sleep: float,
    sender: object,
) -> BeatParts:
    """Build an engine's parts around `dispatcher`; `store` opens the store when first
    called, `sender` is what the guard's signals name."""
    metrics = BeatMetrics(config.namespace, replica.id, redact(config.url))
    probes = ProbeState(
        monotonic=monotonic,
        liveness_timeout=(
            config.liveness_timeout.total_seconds()
            if config.liveness_timeout is not None
            else default_liveness_timeout(max_sleep)
        ),
    )
    pacing = Pacing()
    return BeatParts(
        metrics=metrics,
        probes=probes,
        pacing=pacing,
        runtime=RuntimeWatch(),
        dispatcher=dispatcher,
        rounds=ClaimRounds(
            store,
            config,
            replica,
            batch=batch,
            pacing=pacing,
            dispatcher=dispatcher,
            metrics=metrics,
            monotonic=monotonic,
        ),
        chores=Housekeeper(store, config, replica, metrics, probes, monotonic=monotonic),
        guard=TickGuard(
            metrics,
            probes,
            monotonic=monotonic,
            max_sleep=max_sleep,
            store_url=lambda: store().display_url,
            url_origin=url_origin(config),
            sender=sender,
        ),
    )
