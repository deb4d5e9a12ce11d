"""The tick's decision, as a pure function: due entries + shared states + now -> a plan.

`plan_tick` is what the scheduler hands a store to run under the tick lock. It reads no
clock, writes nothing, logs nothing and counts nothing: everything it decided comes back
in the returned `Planned`, which the store returns in its `TickResult`, and the scheduler
logs and counts from there once the store has committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from safebeat import windows
from safebeat.entries import Entry, undecided_after
from safebeat.errors import UnreadableState
from safebeat.identity import task_id_for
from safebeat.record_rules import pause_ends
from safebeat.records import EntryState, NewClaim, NewSkip, TickPlan
from safebeat.windows import Due, Overlap
from safebeat.windows.searches import SearchUnfinished

_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class Planned(TickPlan):
    """A tick plan, with what the scheduler needs to know afterwards.

    `upcoming`: per planned entry, when to plan it next: its next window after `now`, or
    later by the entry's jitter (None: it has no more);
    `errors`: entries whose windows could not be computed, with the error (they get no
    claim, no skip and no advance, and are planned again at `upcoming`).
    """

    upcoming: Mapping[str, datetime | None] = field(default_factory=dict)
    errors: Mapping[str, Exception] = field(default_factory=dict)


#: When a custom schedule's search that outran the plan's budget goes on (at the latest).
SEARCH_AGAIN = timedelta(seconds=1)

#: How long a queued window blocks the next under `skip_if_queued` when `queue_timeouts`
#: names none for its entry: the default of `safebeat_overlap_timeout`.
DEFAULT_QUEUE_TIMEOUT = timedelta(hours=1)


def queue_timeouts(config_timeout: timedelta, entries: Mapping[str, Entry]) -> dict[str, timedelta]:
    """How long a window of each `skip_if_queued` entry waits in the queue before it is
    presumed lost: the entry's `expires` option (seconds; the worker drops the message
    after it), else `config_timeout` (`safebeat_overlap_timeout`)."""
    timeouts: dict[str, timedelta] = {}
    for name, entry in entries.items():
        if entry.overlap is Overlap.SKIP_IF_QUEUED:
            expires = entry.options.get("expires")
            if isinstance(expires, int | float) and not isinstance(expires, bool) and expires > 0:
                timeouts[name] = timedelta(seconds=float(expires))
            else:
                timeouts[name] = config_timeout
    return timeouts


def plan_tick(
    entries: Mapping[str, Entry],
    states: Mapping[str, EntryState],
    now: datetime,
    *,
    namespace: str,
    retry_after: timedelta,
    queue_timeouts: Mapping[str, timedelta] | None = None,
) -> Planned:
    """Decide the windows of every entry in `states` that this replica defines.

    For each: the windows after `entries.undecided_after` up to `now`
    follow its missed-window policy (`windows.due`); a paused entry skips them all (a
    pause with an end only those before `paused_until`, `record_rules.pause_ends`); the rule
    of the entry's overlap policy (`windows.apply_overlap`) decides from the facts the
    store read (`state.live_run`, `state.newest_dispatched`): `forbid` skips them while its
    previous run is alive, `skip_if_queued` while its previous window waits in the queue,
    up to its timeout in `queue_timeouts`. Dispatched windows become claims with their
    deterministic task ids, skipped spans become skips, and the entry's decided-until
    advances to the last window decided. An entry whose windows cannot be computed, or
    whose state the store could not read back (`EntryState.unreadable`), is reported in
    `errors` and retried `retry_after` from `now`; the others are unaffected. An entry
    whose custom schedule's search outran the caller's budget (`windows.search_budget`)
    decides nothing and is planned again soon, the search going on where it stopped.
    """
    queue_timeouts = queue_timeouts or {}
    claims: list[NewClaim] = []
    skips: list[NewSkip] = []
    advances: dict[str, datetime] = {}
    upcoming: dict[str, datetime | None] = {}
    errors: dict[str, Exception] = {}
    decisions: dict[_DueKey, Due] = {}
    for name, state in states.items():
        entry = entries.get(name)
        if entry is None:
            continue
        if state.unreadable is not None:  # put aside: no window decided until it reads back
            errors[name] = UnreadableState(name, state.unreadable)
            upcoming[name] = now + retry_after
            continue
        try:
            decision, held = _decide(entry, state, now, decisions)
        except SearchUnfinished:  # a custom schedule's search goes on at the next tick
            upcoming[name] = now + min(retry_after, SEARCH_AGAIN)
            continue
        except Exception as exc:  # noqa: BLE001 - one bad entry must not stop the others
            errors[name] = exc
            upcoming[name] = now + retry_after
            continue
        if state.paused_at(now):
            decision = windows.paused(decision)
        elif entry.overlap is not Overlap.ALLOW and decision.dispatch:
            timeout = queue_timeouts.get(name, DEFAULT_QUEUE_TIMEOUT)
            facts = windows.EntryFacts(state.live_run, state.newest_dispatched, now, timeout)
            decision = windows.apply_overlap(entry.overlap, decision, facts)
        for window in decision.dispatch:
            claims.append(NewClaim(name, window, task_id_for(namespace, name, window), entry.task))
        for span in (*held, *decision.skipped) if held else decision.skipped:
            skips.append(NewSkip(name, span.last, span.first, span.count, span.reason.value))
        last = decision.last_window  # the windows a pause held all come before it
        if last is None and held:
            last = max(span.last for span in held)
        if last is not None:
            advances[name] = last
        upcoming[name] = decision.wake_at  # the next send time, after any jitter
    return Planned(claims, skips, advances, upcoming, errors)


#: What `windows.due` decides from, but `now` (one per plan): entries due at one instant
#: mostly share a rule, a policy and the instant their windows were decided until.
_DueKey = tuple[windows.Rule, datetime, windows.Policy, datetime | None]


def _due(
    entry: Entry, after: datetime, now: datetime, state: EntryState, decisions: dict[_DueKey, Due]
) -> Due:
    """`windows.due` for the entry, worked out once per plan for the entries that share
    its arguments (`due` is a function of them alone; a custom schedule's rule is compared
    by identity, so its search is never shared)."""
    key = (entry.rule, after, entry.policy, state.anchor)
    try:
        return decisions[key]
    except KeyError:
        pass
    except TypeError:  # an argument that cannot be hashed: decided on its own
        return windows.due(
            entry.rule, after=after, now=now, policy=entry.policy, anchor=state.anchor
        )
    decision = windows.due(
        entry.rule, after=after, now=now, policy=entry.policy, anchor=state.anchor
    )
    decisions[key] = decision
    return decision


def _decide(
    entry: Entry, state: EntryState, now: datetime, decisions: dict[_DueKey, Due]
) -> tuple[Due, tuple[windows.SkippedSpan, ...]]:
    """The entry's windows up to `now`, and the spans a pause that ended skips before them.

    When a pause ended after the last decided window (`record_rules.pause_ends`), the windows
    before its end are skipped as paused (however late this tick runs) and the windows from
    its end on follow the entry's policy; otherwise there is no such span.
    """
    after = undecided_after(entry, state)
    ends = pause_ends(state, after, now)
    if ends is None:
        return _due(entry, after, now, state, decisions), ()
    # Every window of the pause is skipped anyway, so no jitter holds any of them back.
    during = windows.paused(
        windows.due(
            entry.rule,
            after=after,
            now=ends - _MICROSECOND,
            policy=replace(entry.policy, jitter=None),
            anchor=state.anchor,
        )
    )
    since = windows.due(
        entry.rule,
        after=max(after, ends - _MICROSECOND),
        now=now,
        policy=entry.policy,
        anchor=state.anchor,
    )
    return since, during.skipped
