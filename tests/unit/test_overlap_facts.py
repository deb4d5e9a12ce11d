"""What the overlap rules derive from the facts a store reads (`safebeat.facts`), and which
rule each policy applies: pure, with no store."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from safebeat.beat.planning import DEFAULT_QUEUE_TIMEOUT, plan_tick
from safebeat.config import Config
from safebeat.entries import compile_entry
from safebeat.facts import Dispatched, LiveRun
from safebeat.records import EntryState
from safebeat.windows import (
    OVERLAP_RULES,
    Due,
    EntryFacts,
    Overlap,
    SkipReason,
    apply_overlap,
    queued_since,
    running_since,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
S = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)
RUN = LiveRun(window=T0 - MINUTE, started_at=T0 - 50 * S, lease_until=T0 + MINUTE, task_id="t")


def due(*dispatch: datetime) -> Due:
    return Due(dispatch, (), dispatch[-1] + MINUTE)


def facts(run: LiveRun | None = None, dispatched: Dispatched | None = None) -> EntryFacts:
    return EntryFacts(run, dispatched, T0 + MINUTE, 5 * MINUTE)


def test_running_since_is_the_live_runs_start() -> None:
    assert running_since(RUN) == T0 - 50 * S
    assert running_since(None) is None


@pytest.mark.parametrize(
    ("dispatched", "expected"),
    [
        (None, None),
        (Dispatched(T0 - MINUTE, T0 - 59 * S), T0 - 59 * S),
        (Dispatched(T0 - MINUTE, T0 - 59 * S, started_at=T0 - 58 * S), None),
    ],
    ids=["nothing dispatched", "waiting in the queue", "started"],
)
def test_queued_since_is_the_claim_of_a_window_no_worker_started(
    dispatched: Dispatched | None, expected: datetime | None
) -> None:
    assert queued_since(dispatched) == expected


def test_the_state_still_reads_the_derived_times() -> None:
    """`state.running_since` and `state.queued_since` are the rules' answers, not stored."""
    waiting = Dispatched(T0, T0 + S)
    state = EntryState("e", T0, T0, None, "d", "", live_run=RUN, newest_dispatched=waiting)
    assert state.running_since == running_since(RUN)
    assert state.queued_since == queued_since(waiting)


def test_every_policy_but_allow_has_a_rule() -> None:
    assert set(OVERLAP_RULES) == set(Overlap) - {Overlap.ALLOW}
    assert apply_overlap(Overlap.ALLOW, due(T0, T0 + MINUTE), facts(RUN)) == due(T0, T0 + MINUTE)


def test_forbid_reads_the_live_run() -> None:
    blocked = apply_overlap(Overlap.FORBID, due(T0, T0 + MINUTE), facts(RUN))
    assert blocked.dispatch == ()
    assert [s.reason for s in blocked.skipped] == [SkipReason.OVERLAP]
    assert apply_overlap(Overlap.FORBID, due(T0), facts()) == due(T0)


def test_skip_if_queued_reads_the_newest_dispatched_window() -> None:
    waiting = Dispatched(T0 - MINUTE, T0 - MINUTE)
    blocked = apply_overlap(Overlap.SKIP_IF_QUEUED, due(T0), facts(dispatched=waiting))
    assert blocked.dispatch == ()
    assert [s.reason for s in blocked.skipped] == [SkipReason.QUEUED]
    started = Dispatched(T0 - MINUTE, T0 - MINUTE, started_at=T0 - MINUTE + S)
    assert apply_overlap(Overlap.SKIP_IF_QUEUED, due(T0), facts(dispatched=started)) == due(T0)


def test_a_rule_is_not_asked_about_an_answer_that_dispatches_nothing() -> None:
    nothing = Due((), (), T0 + MINUTE)
    assert apply_overlap(Overlap.FORBID, nothing, facts(RUN)) is nothing


def test_the_planner_hands_an_entrys_rule_the_facts_of_its_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A policy is its line in OVERLAP_RULES: the planner looks the rule up and hands it the
    state's facts, the tick's now and the entry's queue timeout; here a rule standing in
    for a new policy reads the live run's task id and holds the window back."""
    read: list[EntryFacts] = []

    def rule(decision: Due, facts: EntryFacts) -> Due:
        read.append(facts)
        return Due((), decision.skipped, decision.next_window)

    monkeypatch.setitem(OVERLAP_RULES, Overlap.FORBID, rule)
    entry = compile_entry(
        "a",
        {"task": "t.run", "schedule": 60.0, "options": {"safebeat": {"overlap": "forbid"}}},
        app_timezone=timezone.utc,
        config=Config(namespace="plan"),
    )
    state = EntryState("a", T0, T0, None, "d", "every 60s", live_run=RUN)
    now = T0 + 61 * S
    planned = plan_tick({"a": entry}, {"a": state}, now, namespace="plan", retry_after=S)
    assert planned.claims == []
    assert read == [EntryFacts(RUN, None, now, DEFAULT_QUEUE_TIMEOUT)]
    assert read[0].live_run is not None
    assert read[0].live_run.task_id == "t"
