"""Rules applied to one entry's answer after the policy: overlap (`forbid`, `skip_if_queued`)
and pause.

The store reads facts about an entry's dispatch rows (`safebeat.facts`) and decides
nothing; what each overlap policy looks at is derived from them here (`running_since`,
`queued_since`), and `OVERLAP_RULES` says which rule each policy applies. A new policy
is a rule and a line there: no store changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from safebeat.windows.answer import Due, SkippedSpan, SkipReason
from safebeat.windows.policy import Overlap

if TYPE_CHECKING:
    from safebeat.facts import Dispatched, LiveRun


@dataclass(frozen=True, slots=True)
class EntryFacts:
    """What an overlap rule decides from: the store's facts about the entry (`live_run`,
    `newest_dispatched`, see `safebeat.facts`), the tick's `now` (store time) and the
    entry's `queue_timeout` (how long a queued window blocks `skip_if_queued`)."""

    live_run: LiveRun | None
    newest_dispatched: Dispatched | None
    now: datetime
    queue_timeout: timedelta


def running_since(run: LiveRun | None) -> datetime | None:
    """The start of the entry's newest run holding a live lease, or None: what
    `overlap="forbid"` looks at."""
    return None if run is None else run.started_at


def queued_since(dispatched: Dispatched | None) -> datetime | None:
    """When the entry's newest dispatched window was claimed, while no worker has started
    it, else None: what `overlap="skip_if_queued"` looks at."""
    if dispatched is None or dispatched.started_at is not None:
        return None
    return dispatched.claimed_at


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


def _forbid(decision: Due, facts: EntryFacts) -> Due:
    return forbid_overlap(decision, running_since=running_since(facts.live_run))


def _skip_if_queued(decision: Due, facts: EntryFacts) -> Due:
    since = queued_since(facts.newest_dispatched)
    return skip_if_queued(decision, queued_since=since, now=facts.now, timeout=facts.queue_timeout)


#: The rule each overlap policy applies to an entry's answer (`allow`: none).
OVERLAP_RULES: dict[Overlap, Callable[[Due, EntryFacts], Due]] = {
    Overlap.FORBID: _forbid,
    Overlap.SKIP_IF_QUEUED: _skip_if_queued,
}


def apply_overlap(overlap: Overlap, decision: Due, facts: EntryFacts) -> Due:
    """`decision` after the rule of the entry's overlap policy (`OVERLAP_RULES`)."""
    rule = OVERLAP_RULES.get(overlap)
    return decision if rule is None or not decision.dispatch else rule(decision, facts)
