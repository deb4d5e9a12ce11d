"""The pure tick planner: due windows become claims, skips and advances, nothing else."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from safebeat.config import Config
from safebeat.entries import Entry, compile_entry
from safebeat.identity import task_id_for
from safebeat.planning import plan_tick
from safebeat.records import EntryState, NewClaim

UTC = timezone.utc
CONFIG = Config(namespace="plan")
ANCHOR = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RETRY = timedelta(seconds=5)


def entry(name: str, **raw: object) -> Entry:
    return compile_entry(
        name, {"task": "t.run", "schedule": 60.0, **raw}, app_timezone=UTC, config=CONFIG
    )


def state(name: str, **changes: object) -> EntryState:
    fresh = EntryState(name, ANCHOR, ANCHOR, None, "d", "every 60s")
    return replace(fresh, **changes)  # type: ignore[arg-type]


def test_a_due_window_is_claimed_with_its_task_id_and_advances_the_entry() -> None:
    """One window due: one claim with the deterministic id, the advance, the next window."""
    now = ANCHOR + timedelta(seconds=61)
    window = ANCHOR + timedelta(seconds=60)
    planned = plan_tick(
        {"a": entry("a")},
        {"a": state("a")},
        now,
        namespace="plan",
        retry_after=RETRY,
    )
    assert list(planned.claims) == [
        NewClaim("a", window, task_id_for("plan", "a", window), "t.run")
    ]
    assert planned.skips == []
    assert planned.advances == {"a": window}
    assert planned.upcoming == {"a": ANCHOR + timedelta(seconds=120)}
    assert planned.errors == {}


def test_a_paused_entry_skips_its_windows_as_paused() -> None:
    """A paused entry gets no claim: its due window is skipped with reason paused."""
    now = ANCHOR + timedelta(seconds=61)
    planned = plan_tick(
        {"a": entry("a")},
        {"a": state("a", paused=True)},
        now,
        namespace="plan",
        retry_after=RETRY,
    )
    assert planned.claims == []
    assert [(s.reason, s.count) for s in planned.skips] == [("paused", 1)]
    assert planned.advances == {"a": ANCHOR + timedelta(seconds=60)}


def test_an_entry_that_fails_is_reported_and_the_others_are_planned() -> None:
    """An entry whose windows raise is in `errors`, retried after retry_after; the rest plan."""
    now = ANCHOR + timedelta(seconds=61)
    broken = replace(entry("bad"), rule=object())  # type: ignore[arg-type]
    planned = plan_tick(
        {"bad": broken, "a": entry("a")},
        {"bad": state("bad"), "a": state("a")},
        now,
        namespace="plan",
        retry_after=RETRY,
    )
    assert set(planned.errors) == {"bad"}
    assert planned.upcoming["bad"] == now + RETRY
    assert [c.entry for c in planned.claims] == ["a"]
    assert "bad" not in planned.advances


def test_states_of_entries_this_replica_does_not_define_are_left_alone() -> None:
    """A state with no local entry (another replica's) gets no claim, skip or advance."""
    planned = plan_tick(
        {},
        {"other": state("other")},
        ANCHOR + timedelta(hours=1),
        namespace="plan",
        retry_after=RETRY,
    )
    assert (planned.claims, planned.skips, planned.advances, planned.upcoming) == ([], [], {}, {})
