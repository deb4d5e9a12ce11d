"""The pure rules every store and the scheduler apply to safebeat's records
(`safebeat.records`): what a tick may write (`fenced`, `fence`, `states_after`), which
stale claims a take-over pass takes (`take_over_page`, `unsent_and_stale`,
`released_age`), whether a delivery of a window runs (`lease_alive`, `run_alive`,
`decide_start`), where a pause with an end splits a tick's windows (`pause_ends`) and how
many runs in a row failed (`consecutive_failures`).

Nothing here does I/O; every backend applies the same rules, and the contract suite
(`safebeat.testing.stores`) holds each backend to them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from safebeat.records import (
    DispatchRecord,
    EntryState,
    Outcome,
    Reclaim,
    ReclaimPage,
    StaleClaim,
    Start,
    Status,
    TickPlan,
    _with_last_window,
)


def take_over_page(reclaim: Reclaim, page: Sequence[StaleClaim]) -> tuple[list[int], ReclaimPage]:
    """The rows to take over of `page` (the stale claims a pass read after `reclaim.after`,
    at most `reclaim.page`, oldest first in the store's order) and where the pass ends.

    Taken: those whose entry is `in reclaim.defines`, the first `reclaim.limit` of them.
    The pass ends at the claim that made the limit, or at the last one read if the page is
    full; a short page read to the end (`resume` None). Every store chooses by this rule.
    """
    chosen: list[int] = []
    for row in page:
        if row.entry in reclaim.defines:
            chosen.append(row.id)
            if len(chosen) >= reclaim.limit:
                return chosen, ReclaimPage(len(page), row.mark)
    full = len(page) >= reclaim.page
    return chosen, ReclaimPage(len(page), page[-1].mark if full else None)


def released_age(timeout: timedelta) -> timedelta:
    """How far before store now a handed-back claim's `claimed_at` is set (see
    `TickStore.release_claims`): just past `timeout`, so the take-over rule
    (`claimed_at < now - timeout`) already holds for it at the next tick of any replica."""
    return timeout + timedelta(microseconds=1)


def lease_alive(lease_until: datetime | None, now: datetime) -> bool:
    """Whether a run whose lease ends at `lease_until` is alive at store time `now`.

    A run without a lease (started by a version without leases) counts as dead.
    """
    return lease_until is not None and now < lease_until


def run_alive(
    started_at: datetime | None,
    finished_at: datetime | None,
    lease_until: datetime | None,
    now: datetime,
) -> bool:
    """Whether a dispatch row's run is alive at store time `now`: it started, has not
    finished, and holds a live lease (`lease_alive`)."""
    return started_at is not None and finished_at is None and lease_alive(lease_until, now)


def unsent_and_stale(record: DispatchRecord, stale_before: datetime, now: datetime) -> bool:
    """Whether the take-over re-publishes `record` as a claim left unsent: it is still
    `claimed`, since before `stale_before` (store now minus `safebeat_claim_timeout`), and
    its run is not alive (`run_alive`).

    A claim stays `claimed` after its publish whenever recording it failed (a store blip,
    SIGTERM or SIGKILL before the record); its run may have started meanwhile. A run that
    holds a live lease is never taken over: the take-over clears the lease, so the
    re-published copy would take the live run over beside it. Once the lease lapses
    without a finish, the run is dead and the take-over finds it as one. Every backend
    applies this rule (the SQL stores in `stale_claims` and `take_over`, Redis in
    `is_stale`, the Django ORM store in its filter); the contract suite holds each to it.
    """
    return (
        record.status is Status.CLAIMED
        and record.claimed_at < stale_before
        and not run_alive(record.started_at, record.finished_at, record.lease_until, now)
    )


def decide_start(
    *,
    started_at: datetime | None,
    finished_at: datetime | None,
    outcome: Outcome | None,
    lease_until: datetime | None,
    recorded_retries: int | None,
    retries: int,
    now: datetime,
    other_run_alive: bool = False,
) -> Start:
    """May this delivery of a dispatched window run? The rule of `start_execution`.

    From the window's dispatch row (`started_at`, `finished_at`, the `outcome` its run
    recorded, `lease_until`, `recorded_retries`: the Celery `retries` of the run that
    started last), this delivery (its Celery `retries`) and, for an entry with
    `overlap="forbid"`, whether another window of the entry has a run whose lease is
    alive (`other_run_alive`), at store time `now`:

    - the row never started: RUN;
    - it started, never finished, and its lease is alive: DEFER, whatever `retries` this
      delivery carries (its run is alive; this delivery must stay around in case that
      run dies). A Celery retry whose message arrives before its previous attempt's end
      is recorded waits here one lease: never two live runs of one window;
    - it started, never finished, and its lease expired: TAKEOVER (its run is dead),
      whatever `retries` this delivery carries;
    - it finished with the outcome `retry` (the task asked Celery for another attempt)
      and `retries` is greater than the recorded one: RUN, the next attempt;
    - it finished otherwise (`success`, `failure`; or `retry` and `retries` is not
      greater): DUPLICATE, the only delivery skipped. A window whose run finished for
      good never runs again, whatever `retries` a late copy carries;
    - a RUN or TAKEOVER while `other_run_alive`: DEFER instead (`forbid` holds however
      the broker orders deliveries).

    Why `retries` decides only after a `retry` end: the recorded retries are those of the
    run that holds the row (with `worker`, they name it, see `LeasedRun.holds`), not a
    count that only grows. A take-over records the retries of the delivery that takes
    over: beat re-publishes a dead run with `retries=0`, and that run's own Celery retry
    comes back as 1 whatever attempt died, so it must start once that run ends with
    `retry`. Keeping the highest count instead would leave the take-over unable to renew
    its lease (its worker knows only its own retries) and would skip its genuine retry as
    a duplicate. So the higher retries of a late copy (an `acks_late` redelivery of an
    older attempt's retry, or its deferred copy) never make it start beside a live run
    nor after a finished one: one `retry` end admits exactly one next start, by whichever
    later attempt's message comes first; the others then find that start.

    Liveness comes only from the lease, never from a run's age or its time limits. A
    store calls it under the row's lock and records the start (with a new lease) for RUN
    and TAKEOVER, or counts the duplicate. (PostgreSQL's `start_execution` statement and
    Redis's `start_execution` script decide inside the server, in one round trip, by
    this same rule; the contract suite holds every backend to it.)
    """
    if started_at is None:
        verdict = Start.RUN
    elif finished_at is not None:
        if outcome is not Outcome.RETRY or retries <= (recorded_retries or 0):
            return Start.DUPLICATE
        verdict = Start.RUN
    elif lease_alive(lease_until, now):
        return Start.DEFER
    else:
        verdict = Start.TAKEOVER
    return Start.DEFER if other_run_alive else verdict


def pause_ends(state: EntryState, after: datetime, now: datetime) -> datetime | None:
    """Where a pause with an end splits the windows `(after, now]` a tick decides at `now`.

    None when nothing splits them: the entry is not paused, or its pause ended at or before
    `after` (its windows follow the policy), or it is paused at `now` (every one is skipped
    as paused). Otherwise the pause ended at the
    returned instant (`paused_until`) after `after`: the windows before it are skipped as
    paused and those from it on follow the entry's policy, whenever the tick runs. So a pause
    ends by itself, on every replica, with no write: the planner reads `paused_until`
    against the store clock.
    """
    until = state.paused_until
    if not state.paused or until is None or now < until or until <= after:
        return None
    return until


def fenced(window: datetime, last_window: datetime | None) -> bool:
    """Whether a plan may no longer write `window`: the fence of every tick's write.

    `last_window` is the entry's stored newest decided window *at write time* (not when
    the plan was made). A window at or before it was already decided, claimed or skipped,
    by some replica: a plan made before that decision (a replica frozen or slow while
    planning, whose lock expired meanwhile) must neither claim it nor record it as
    skipped. Every backend applies this rule in the same statement or script as the write
    (the SQL stores in `insert_dispatches`' `WHERE`, Redis in `finish_tick`, the others
    through `fence`); the contract suite holds each backend to it. Windows written by
    hand (`AdminStore.write_windows`: a trigger, a backfill) are not a plan and not fenced.
    """
    return last_window is not None and window <= last_window


def fence(plan: TickPlan, last_windows: Mapping[str, datetime | None]) -> TickPlan:
    """The part of `plan` that `fenced` still lets through, given each entry's stored
    last window at write time (entries missing from `last_windows` are let through)."""
    claims = [c for c in plan.claims if not fenced(c.window, last_windows.get(c.entry))]
    skips = [s for s in plan.skips if not fenced(s.window, last_windows.get(s.entry))]
    if len(claims) == len(plan.claims) and len(skips) == len(plan.skips):
        return plan
    return replace(plan, claims=claims, skips=skips)


def states_after(states: Mapping[str, EntryState], plan: TickPlan) -> dict[str, EntryState]:
    """Apply the plan's advances to `states` the way the stores do: the later window wins."""
    result = dict(states)
    for name, window in plan.advances.items():
        state = result.get(name)
        if state is not None and (state.last_window is None or window > state.last_window):
            result[name] = _with_last_window(state, window)
    return result


def consecutive_failures(history: Sequence[DispatchRecord]) -> int:
    """How many of an entry's latest finished runs failed in a row, counted back from its
    newest window until a success.

    `history` is the entry's dispatch rows in any order. Rows with no final outcome (not
    started, running, or waiting for a Celery retry) are passed over: they neither count
    nor break the run of failures. A window skipped because the entry was paused ends the
    count: failures before a pause were already acted upon.
    """
    count = 0
    for record in sorted(history, key=lambda r: r.window, reverse=True):
        if record.status is Status.SKIPPED:
            if record.reason == "paused":
                break
            continue
        if record.outcome is Outcome.SUCCESS:
            break
        if record.outcome is Outcome.FAILURE:
            count += 1
    return count
