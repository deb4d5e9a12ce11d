"""The pure tick planner: due windows become claims, skips and advances, nothing else."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from safebeat.beat.planning import Planned, plan_tick
from safebeat.config import Config
from safebeat.entries import Entry, compile_entry
from safebeat.identity import TASK_ID_NAMESPACE, format_window, task_id_for
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


def plan_at(now: datetime, paused_state: EntryState, **raw: object) -> Planned:
    return plan_tick(
        {"a": entry("a", **raw)},
        {"a": paused_state},
        now,
        namespace="plan",
        retry_after=RETRY,
    )


def test_a_pause_with_an_end_skips_windows_before_it_and_sends_from_it_on() -> None:
    """Paused until 12:02:30 (every 60 s): at 12:02:01 the 12:01 and 12:02 windows are
    skipped (the newest as paused, the older one missed, as any pause does); at 12:03:01
    the 12:03 window is claimed, with no resume written."""
    until = ANCHOR + timedelta(seconds=150)
    paused = state("a", paused=True, paused_until=until, pause_note="db upgrade")
    during = plan_at(ANCHOR + timedelta(seconds=121), paused)
    assert during.claims == []
    assert [(s.reason, s.window) for s in during.skips] == [
        ("missed", ANCHOR + timedelta(seconds=60)),
        ("paused", ANCHOR + timedelta(seconds=120)),
    ]
    decided = replace(paused, last_window=during.advances["a"])
    after = plan_at(ANCHOR + timedelta(seconds=181), decided)
    window = ANCHOR + timedelta(seconds=180)
    assert [c.window for c in after.claims] == [window]
    assert after.skips == []
    assert after.advances == {"a": window}


def test_a_tick_after_a_pause_ended_still_skips_the_windows_before_its_end() -> None:
    """No tick ran during the pause: a tick after its end skips the windows before the end
    as paused and sends those after it by the entry's policy (all), whenever it runs."""
    until = ANCHOR + timedelta(seconds=150)
    paused = state("a", paused=True, paused_until=until)
    planned = plan_at(
        ANCHOR + timedelta(seconds=241), paused, options={"safebeat": {"misfire": "all"}}
    )
    assert [c.window for c in planned.claims] == [
        ANCHOR + timedelta(seconds=180),
        ANCHOR + timedelta(seconds=240),
    ]
    assert [(s.reason, s.first, s.window) for s in planned.skips] == [
        ("paused", ANCHOR + timedelta(seconds=60), ANCHOR + timedelta(seconds=120))
    ]
    assert planned.advances == {"a": ANCHOR + timedelta(seconds=240)}


def test_a_window_at_the_pause_end_is_sent() -> None:
    """A pause ends at its instant: a window exactly at `paused_until` is dispatched."""
    until = ANCHOR + timedelta(seconds=120)
    paused = state("a", paused=True, paused_until=until, last_window=ANCHOR + timedelta(seconds=60))
    planned = plan_at(ANCHOR + timedelta(seconds=121), paused)
    assert [c.window for c in planned.claims] == [until]
    assert planned.skips == []


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


@given(
    namespace=st.text(max_size=12),
    name=st.text(max_size=40),
    window=st.datetimes(timezones=st.just(UTC)),
)
def test_a_task_id_is_the_uuid5_of_namespace_entry_and_window(
    namespace: str, name: str, window: datetime
) -> None:
    """The task id every replica derives is exactly uuid5 of the three, whatever the text."""
    expected = uuid.uuid5(TASK_ID_NAMESPACE, f"{namespace}\x1f{name}\x1f{format_window(window)}")
    assert task_id_for(namespace, name, window) == str(expected)


def test_entries_sharing_a_schedule_are_decided_alike_each_with_its_own_task_ids() -> None:
    """Entries with one rule and policy are decided once per plan: each still gets its own
    claims and task ids, and one decided further along gets its own decision."""
    now = ANCHOR + timedelta(seconds=185)
    entries = {name: entry(name) for name in ("a", "b", "c")}
    states = {
        "a": state("a", last_window=ANCHOR + timedelta(seconds=60)),
        "b": state("b", last_window=ANCHOR + timedelta(seconds=60)),
        "c": state("c", last_window=ANCHOR + timedelta(seconds=120)),
    }
    planned = plan_tick(entries, states, now, namespace="plan", retry_after=RETRY)
    window = ANCHOR + timedelta(seconds=180)
    assert planned.claims == [
        NewClaim(name, window, task_id_for("plan", name, window), "t.run") for name in "abc"
    ]
    skipped = {skip.entry: (skip.first, skip.window, skip.count) for skip in planned.skips}
    assert skipped == {
        "a": (ANCHOR + timedelta(seconds=120), ANCHOR + timedelta(seconds=120), 1),
        "b": (ANCHOR + timedelta(seconds=120), ANCHOR + timedelta(seconds=120), 1),
    }
    assert planned.advances == dict.fromkeys("abc", window)
