"""Rules applied to one entry's answer after the policy: overlap (`forbid`, `skip_if_queued`)
and pause."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from safebeat.windows.answer import Due, SkippedSpan, SkipReason


def forbid_overlap(decision: Due, *, running_since: datetime | None) -> Due:
    """Apply `overlap="forbid"` to one entry's answer.

    While the entry has a live run (`running_since`: the start of its newest unfinished
    run whose lease is alive, as the store reports it), nothing is dispatched: the
    windows `decision` would dispatch are skipped as `overlap`. Otherwise at most the
    newest one is dispatched, since two windows sent at once would run side by side;
    older ones are skipped as `overlap`. A run whose lease expired (its worker died) is
    not live, whatever its age, so it blocks nothing.
    """
    dispatch = decision.dispatch
    if not dispatch:
        return decision
    keep = () if running_since is not None else dispatch[-1:]
    blocked = dispatch[: len(dispatch) - len(keep)]
    if not blocked:
        return decision
    # Due windows are consecutive windows of the rule, so one span describes them exactly.
    span = SkippedSpan(blocked[0], blocked[-1], len(blocked), SkipReason.OVERLAP)
    return dataclasses.replace(decision, dispatch=keep, skipped=(*decision.skipped, span))


def skip_if_queued(
    decision: Due, *, queued_since: datetime | None, now: datetime, timeout: timedelta
) -> Due:
    """Apply `overlap="skip_if_queued"` to one entry's answer.

    While the entry's newest dispatched window, claimed at `queued_since`, waits for a
    worker (no worker started it) and was claimed less than `timeout` ago, nothing is
    dispatched: the windows `decision` would dispatch are skipped as `queued`, so a
    stalled queue does not fill with copies. Otherwise at most the newest one is
    dispatched (older ones would only queue behind it), older ones skipped as `queued`. A
    window queued for longer than `timeout` is presumed lost (expired, purged) and blocks
    nothing.
    """
    dispatch = decision.dispatch
    if not dispatch:
        return decision
    queued = queued_since is not None and now - queued_since < timeout
    keep = () if queued else dispatch[-1:]
    blocked = dispatch[: len(dispatch) - len(keep)]
    if not blocked:
        return decision
    # Due windows are consecutive windows of the rule, so one span describes them exactly.
    span = SkippedSpan(blocked[0], blocked[-1], len(blocked), SkipReason.QUEUED)
    return dataclasses.replace(decision, dispatch=keep, skipped=(*decision.skipped, span))


def paused(decision: Due) -> Due:
    """A paused entry's answer: every window `decision` would dispatch is skipped as `paused`,
    so resuming later never sends the windows that passed meanwhile."""
    if not decision.dispatch:
        return decision
    # Due windows are consecutive windows of the rule, so one span describes them exactly.
    first, last = decision.dispatch[0], decision.dispatch[-1]
    span = SkippedSpan(first, last, len(decision.dispatch), SkipReason.PAUSED)
    return dataclasses.replace(decision, dispatch=(), skipped=(*decision.skipped, span))
