"""What beat logs and counts about a tick, from what the store and the dispatcher returned.

Nothing here decides anything: the planner (`safebeat.beat.planning`) and the dispatcher
(`safebeat.beat.dispatch`) return what they did, and these functions turn it into log lines
and metrics once the store has committed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from celery.utils.dispatch import Signal

from safebeat import signals
from safebeat.beat.dispatch import Dispatched
from safebeat.beat.metrics import BeatMetrics
from safebeat.beat.planning import Planned
from safebeat.entries import Entry
from safebeat.errors import EntryError, UnreadableState
from safebeat.identity import format_window
from safebeat.records import Claim, EntryState, NewSkip, TickResult
from safebeat.windows import SkipReason

logger = logging.getLogger("safebeat.scheduler")


def report_plan(planned: Planned, metrics: BeatMetrics, said: dict[str, str] | None = None) -> None:
    """Log and count a committed plan's failed entries and skipped windows.

    An entry whose state cannot be read back is said once per problem (`said`: what was
    said, by entry; an entry planned again is dropped from it), not at every retry; an
    entry whose windows cannot be computed is logged with its traceback once per error,
    then in one line at each retry.
    """
    said = {} if said is None else said
    for name in [n for n in said if n not in planned.errors]:
        if name in planned.upcoming:  # planned again, and readable now
            del said[name]
    for name, exc in planned.errors.items():
        if isinstance(exc, UnreadableState):
            if said.get(name) != exc.unreadable:
                said[name] = exc.unreadable
                metrics.entry_error(name)
                logger.error("safebeat: %s", exc)
            continue
        metrics.entry_error(name)
        kind = _kind(exc)
        if said.get(name) == kind:  # its traceback was logged at the first failure
            logger.error(
                "safebeat: entry %r: still cannot compute its windows (%s); retrying later",
                name,
                exc,
            )
            continue
        said[name] = kind
        logger.error(
            "safebeat: entry %r: cannot compute its windows (%s); retrying later, "
            "the other entries run",
            name,
            exc,
            exc_info=exc,
        )
    for skip in planned.skips:
        metrics.skipped(skip.entry, skip.reason, skip.count or 1)
        logger.debug(
            "safebeat: entry %r: skipped %s window(s) %s..%s (%s)",
            skip.entry,
            "many" if skip.count is None else skip.count,
            format_window(skip.first),
            format_window(skip.window),
            skip.reason,
        )
    # Windows of paused entries are skipped on purpose: said at INFO, not warned about.
    paused = [s for s in planned.skips if s.reason == SkipReason.PAUSED.value]
    if paused:
        _summarize_paused(paused)
    unexpected = [s for s in planned.skips if s.reason != SkipReason.PAUSED.value]
    if unexpected:
        _summarize_skips(unexpected)


def _kind(exc: Exception) -> str:
    """What kind of failure `exc` is, whatever the window or instant its message names."""
    cause = exc.__cause__
    return type(exc).__qualname__ + ("" if cause is None else f" from {type(cause).__qualname__}")


def skipped_windows(skips: Sequence[NewSkip]) -> int:
    """How many windows `skips` stand for (a span too long to count counts as one)."""
    return sum(skip.count or 1 for skip in skips)


def _summarize_paused(skips: Sequence[NewSkip]) -> None:
    """One INFO line per tick for the windows paused entries skipped, so the replica that
    skipped a window says so in its log as it does for one it sent."""
    names = sorted({skip.entry for skip in skips})
    shown = ", ".join(repr(n) for n in names[:5]) + (", ..." if len(names) > 5 else "")
    logger.info(
        "safebeat: skipped %d window(s) of paused entr%s %s (recorded with reason paused)",
        skipped_windows(skips),
        "y" if len(names) == 1 else "ies",
        shown,
    )


def _summarize_skips(skips: Sequence[NewSkip]) -> None:
    """One line per tick, however many entries skipped windows (details at DEBUG)."""
    by_reason: dict[str, int] = {}
    for skip in skips:
        by_reason[skip.reason] = by_reason.get(skip.reason, 0) + (skip.count or 1)
    names = sorted({skip.entry for skip in skips})
    shown = ", ".join(repr(n) for n in names[:5]) + (", ..." if len(names) > 5 else "")
    reasons = ", ".join(f"{count} {reason}" for reason, count in sorted(by_reason.items()))
    logger.warning(
        "safebeat: skipped windows of %d entr%s (%s): %s; see the dispatch history",
        len(names),
        "y" if len(names) == 1 else "ies",
        reasons,
        shown,
    )


def report_claims(
    claimed: Sequence[Claim], reclaimed: Sequence[Claim], metrics: BeatMetrics
) -> None:
    """Count this tick's claims, and say so when stale claims or dead runs are taken over."""
    metrics.claimed(len(claimed))
    if reclaimed:
        for claim in reclaimed:
            metrics.republished(claim.entry)
        logger.warning(
            "safebeat: re-publishing %d claim(s) left unsent past safebeat_claim_timeout "
            "or whose run died (same task ids)",
            len(reclaimed),
        )


def announce_tick(sender: object, result: TickResult, namespace: str, replica: str) -> None:
    """Send the signals of a committed tick: windows claimed, taken over and skipped."""

    def send(signal: Signal, about: Claim | NewSkip, **details: Any) -> None:
        signals.send(
            signal,
            sender,
            namespace=namespace,
            entry=about.entry,
            window=about.window,
            replica=replica,
            **details,
        )

    for claim in result.claimed:
        send(signals.window_claimed, claim, task_id=claim.task_id)
    for claim in result.reclaimed:
        send(signals.window_republished, claim, task_id=claim.task_id, attempts=claim.attempts)
    for skip in result.plan.skips:
        send(signals.window_skipped, skip, first=skip.first, count=skip.count, reason=skip.reason)


def report_dispatch(
    dispatched: Dispatched,
    metrics: BeatMetrics,
    *,
    published_at: datetime | None,
    broker_retry_in: float,
) -> None:
    """Count what was published (with its lag, on the store's clock) and what is owed.

    `published_at`: the store-clock instant of the publish, when known.
    `broker_retry_in`: seconds until the next claim, if the broker was down.
    """
    if dispatched.failed:
        metrics.publish_failed("message", len(dispatched.failed))
    if dispatched.broker_error is not None:
        metrics.publish_failed("broker")
        logger.warning(
            "safebeat: broker unreachable (%s); %d claim(s) stay unsent and will be "
            "re-published when it is back; claiming nothing for %.1fs",
            dispatched.broker_error,
            len(dispatched.unsent),
            broker_retry_in,
        )
    metrics.claims_left_unsent(len(dispatched.unsent))
    if published_at is None:
        return
    for claim in dispatched.sent:
        if claim.attempts == 1:
            metrics.dispatched(claim.entry, claim.window, published_at)


def report_entries(
    entries: Mapping[str, Entry],
    broken: Mapping[str, EntryError],
    reported: Mapping[str, EntryError],
    metrics: BeatMetrics,
) -> None:
    """Log each broken entry once (`reported`: those already said), and export the
    entries' count and the broken ones (for as long as they are)."""
    for name, error in broken.items():
        previous = reported.get(name)
        if previous is None or str(previous) != str(error):
            metrics.entry_error(name)
            logger.error("safebeat: %s; this entry is skipped, the others run", error)
    metrics.set_aside("definition", broken)
    metrics.entries(len(entries))


def serve_metrics(metrics: BeatMetrics, port: int) -> bool:
    """Serve the metrics on `port`; a port that is taken costs the metrics, not beat, and
    is said at ERROR naming the setting."""
    try:
        metrics.serve(port)
    except OSError as exc:
        logger.error(
            "safebeat: cannot serve metrics on port %d (%s): set safebeat_metrics_port "
            "(SAFEBEAT_METRICS_PORT) to a free port; beat runs on, dispatching, without "
            "metrics",
            port,
            exc,
        )
        return False
    return True


def report_registration(
    changed: Mapping[str, str],
    entries: Mapping[str, Entry],
    ran: Mapping[str, str | None] | None = None,
) -> None:
    """Say which entries this replica defines otherwise than the store had them, but for
    those the store had as this replica ran them before it saw them change (`ran`: the
    digests it ran): an entry edited while beat runs is no rolling deploy."""
    for name, previous in changed.items():
        if ran is not None and ran.get(name) == previous:
            continue
        logger.warning(
            "safebeat: entry %r: this replica's definition (digest %s) differs from the "
            "one registered before (%s); during a rolling deploy this is expected, and "
            "each window is still claimed once",
            name,
            entries[name].digest,
            previous,
        )


def report_unregistered(due: Sequence[str], states: Mapping[str, EntryState]) -> bool:
    """Say so when due entries have no state in the store (deleted rows, a flushed Redis);
    return whether any had none."""
    missing = sorted(name for name in due if name not in states)
    if missing:
        logger.warning(
            "safebeat: entries %s are not registered in the store; registering again", missing
        )
    return bool(missing)
