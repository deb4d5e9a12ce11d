"""The pure rules over safebeat's records: run, take over, defer or skip a delivery of a window."""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import datetime, timedelta, timezone

import pytest

from safebeat.facts import Dispatched, LiveRun
from safebeat.record_rules import decide_start, lease_alive, states_after, take_over_page
from safebeat.records import (
    Claim,
    Definition,
    EntryState,
    NewClaim,
    NewSkip,
    Outcome,
    Reclaim,
    ReclaimPage,
    StaleClaim,
    StaleMark,
    Start,
    TickPlan,
)

NOW = datetime(2026, 3, 2, 6, 30, tzinfo=timezone.utc)
S = timedelta(seconds=1)


def decide(
    started: timedelta | None,
    finished: bool = False,
    *,
    outcome: Outcome | None = None,
    lease_left: timedelta | None = 10 * S,
    recorded_retries: int | None = 0,
    retries: int = 0,
    other_run_alive: bool = False,
) -> Start:
    """Decide for a row that started `started` before NOW (None: never started) and whose
    lease ends `lease_left` after NOW (negative: expired; None: no lease recorded); a
    finished row ended with `outcome` (success unless given)."""
    started_at = None if started is None else NOW - started
    finished_at = started_at + S if finished and started_at else None
    if finished_at is not None and outcome is None:
        outcome = Outcome.SUCCESS
    return decide_start(
        started_at=started_at,
        finished_at=finished_at,
        outcome=outcome,
        lease_until=None if lease_left is None else NOW + lease_left,
        recorded_retries=recorded_retries,
        retries=retries,
        now=NOW,
        other_run_alive=other_run_alive,
    )


def test_a_window_that_never_started_runs() -> None:
    """The first delivery of a dispatched window runs, whatever its retry number."""
    assert decide(None, recorded_retries=None, lease_left=None) is Start.RUN
    assert decide(None, recorded_retries=None, retries=3, lease_left=None) is Start.RUN


def test_a_celery_retry_runs_once_its_previous_attempt_ended_asking_for_it() -> None:
    """A delivery whose retry number is above the recorded one, of a run that ended with
    `retry`, is the next attempt: it runs, whatever the ended run's lease says."""
    for lease_left in (10 * S, -10 * S, None):
        verdict = decide(
            S, True, outcome=Outcome.RETRY, lease_left=lease_left, recorded_retries=1, retries=2
        )
        assert verdict is Start.RUN


def test_a_celery_retry_waits_while_its_previous_attempt_lives() -> None:
    """A retry's message that comes before its previous attempt's end is recorded (a retry
    without countdown) is deferred like any other delivery: never two live runs."""
    assert decide(timedelta(minutes=1), recorded_retries=0, retries=1) is Start.DEFER
    assert decide(timedelta(minutes=1), recorded_retries=0, retries=5) is Start.DEFER


def test_a_later_attempt_of_a_dead_run_takes_it_over() -> None:
    """A retry whose previous attempt died before recording its end takes the run over."""
    assert decide(S, lease_left=-S, recorded_retries=0, retries=1) is Start.TAKEOVER


def test_a_take_over_by_an_older_attempt_of_a_dead_run_runs() -> None:
    """Beat re-publishes a dead run with retries 0, whatever attempt died: it takes over."""
    assert decide(S, lease_left=-S, recorded_retries=2, retries=0) is Start.TAKEOVER


@pytest.mark.parametrize("retries", [0, 1])
def test_only_a_delivery_of_a_finished_run_is_a_duplicate(retries: int) -> None:
    """A finished run makes a redelivery (retry number not above the recorded) a duplicate,
    whatever its lease and its outcome say."""
    for lease_left in (10 * S, -10 * S, None):
        for outcome in Outcome:
            verdict = decide(
                S,
                True,
                outcome=outcome,
                lease_left=lease_left,
                recorded_retries=1,
                retries=retries,
            )
            assert verdict is Start.DUPLICATE


@pytest.mark.parametrize("outcome", [Outcome.SUCCESS, Outcome.FAILURE, None])
def test_a_window_that_finished_for_good_never_runs_again_whatever_its_retries(
    outcome: Outcome | None,
) -> None:
    """A late copy of a retry (a higher retry number) after a run that ended for good
    (success, failure, or an outcome this version does not know) is a duplicate."""
    started_at = NOW - S
    for retries in (1, 3):
        verdict = decide_start(
            started_at=started_at,
            finished_at=started_at,
            outcome=outcome,
            lease_until=None,
            recorded_retries=0,
            retries=retries,
            now=NOW,
        )
        assert verdict is Start.DUPLICATE


def test_a_delivery_of_a_run_with_a_live_lease_is_deferred_whatever_its_age() -> None:
    """An unfinished run whose lease is alive is alive, even started days ago: defer."""
    assert decide(S) is Start.DEFER
    assert decide(timedelta(days=3), lease_left=S) is Start.DEFER


def test_a_run_whose_lease_expired_is_taken_over_however_young() -> None:
    """An unfinished run whose lease ended (or that has none) is dead: take it over. At the
    lease's last instant it is already dead."""
    assert decide(S, lease_left=-S) is Start.TAKEOVER
    assert decide(S, lease_left=timedelta(0)) is Start.TAKEOVER
    assert decide(S, lease_left=None) is Start.TAKEOVER
    assert not lease_alive(NOW, NOW)
    assert lease_alive(NOW + timedelta(microseconds=1), NOW)


def test_forbid_defers_a_start_while_another_window_of_the_entry_is_alive() -> None:
    """With another window's run alive, a run or a takeover is deferred; a duplicate stays one."""
    assert decide(None, lease_left=None, other_run_alive=True) is Start.DEFER
    assert decide(S, lease_left=-S, other_run_alive=True) is Start.DEFER
    assert decide(S, True, other_run_alive=True) is Start.DUPLICATE


def test_records_held_per_entry_and_per_window_carry_no_dict() -> None:
    """A replica holds one of these per entry (registration, states) or per window (a
    tick's claims): slots keep each about half the size of one with a `__dict__`."""
    records = [
        Definition("a", "every 5s", "d"),
        EntryState("a", NOW, NOW, None, "d", "every 5s"),
        NewClaim("a", NOW, "id", "task"),
        NewSkip("a", NOW, NOW, 1, "late"),
        Claim(1, "a", NOW, "id", 1),
    ]
    assert [r for r in records if hasattr(r, "__dict__")] == []


def stale_page(*entries: str) -> list[StaleClaim]:
    """Stale claims of `entries`, ids 1, 2, ..., one second apart, oldest first."""
    return [StaleClaim(i, entry, NOW + i * S) for i, entry in enumerate(entries, start=1)]


def test_a_full_page_taken_below_the_limit_goes_on_after_its_last_claim() -> None:
    """Of a full page, those of entries beat defines are taken; the next pass reads after
    the page's last claim, taken or not."""
    reclaim = Reclaim({"a"}, S, limit=3, page=4)
    ids, page = take_over_page(reclaim, stale_page("b", "a", "b", "b"))
    assert ids == [2]
    assert page == ReclaimPage(4, StaleMark(NOW + 4 * S, 4))


def test_a_pass_that_reaches_its_limit_goes_on_after_the_claim_that_made_it() -> None:
    """The claims after the one that made the limit are not skipped: the next pass reads
    from there, whether or not the page was full."""
    reclaim = Reclaim({"a"}, S, limit=2, page=5)
    ids, page = take_over_page(reclaim, stale_page("a", "b", "a", "a"))
    assert ids == [1, 3]
    assert page == ReclaimPage(4, StaleMark(NOW + 3 * S, 3))


def test_a_short_page_was_read_to_the_end_and_the_next_pass_starts_from_the_oldest() -> None:
    """A page with fewer claims than it could hold (or none) ends the round: no place."""
    reclaim = Reclaim({"a"}, S, limit=2, page=5)
    assert take_over_page(reclaim, stale_page("b", "a")) == ([2], ReclaimPage(2, None))
    assert take_over_page(reclaim, []) == ([], ReclaimPage(0, None))


@pytest.mark.parametrize(("limit", "page"), [(0, 10), (10, 0)])
def test_a_take_over_without_room_for_one_claim_is_refused(limit: int, page: int) -> None:
    """A limit or page below one could never make progress: an error naming both."""
    with pytest.raises(ValueError, match=f"limit={limit}, page={page}"):
        Reclaim({"a"}, S, limit=limit, page=page)


def test_states_after_keeps_every_other_field_of_the_state() -> None:
    """The plan's advance changes `last_window` only: every field of EntryState, set to a
    value other than its default, comes through (a field added later included)."""
    values = {
        "name": "e",
        "anchor": NOW - 9 * S,
        "defined_at": NOW - 8 * S,
        "last_window": NOW - 7 * S,
        "digest": "d",
        "schedule": "every 5s",
        "live_run": LiveRun(NOW - 7 * S, NOW - 6 * S, NOW + 30 * S, "t"),
        "paused": True,
        "paused_until": NOW + S,
        "pause_note": "maintenance",
        "newest_dispatched": Dispatched(NOW - 7 * S, NOW - 5 * S),
        "unreadable": "a test of every field",
    }
    assert {f.name for f in fields(EntryState)} == set(values), "new field: add it here"
    state = EntryState(**values)  # type: ignore[arg-type]
    plan = TickPlan(advances={"e": NOW})
    assert states_after({"e": state}, plan) == {"e": replace(state, last_window=NOW)}
    assert states_after({"e": state}, TickPlan(advances={"e": NOW - 8 * S}))["e"] is state


#: The rules safebeat.records held in 0.1.0.
# fmt: off
RULES_0_1_0 = [
    "consecutive_failures", "decide_start", "fence", "fenced", "lease_alive", "pause_ends",
    "released_age", "run_alive", "states_after", "take_over_page", "unsent_and_stale",
]
# fmt: on


@pytest.mark.parametrize("name", RULES_0_1_0)
def test_the_rules_0_1_0_imported_from_records_are_still_found_there(name: str) -> None:
    import safebeat.record_rules
    import safebeat.records

    assert getattr(safebeat.records, name) is getattr(safebeat.record_rules, name)


def test_records_has_no_other_attribute_by_forwarding() -> None:
    import safebeat.records

    with pytest.raises(AttributeError):
        safebeat.records.no_such_rule  # noqa: B018


def test_type_checkers_see_each_rule_records_forwards() -> None:
    """Each rule `safebeat.records` forwards is imported for type checkers too, under its
    own name (re-exported): `from safebeat.records import decide_start` type-checks."""
    import ast
    import inspect

    import safebeat.records

    tree = ast.parse(inspect.getsource(safebeat.records))
    seen = {
        alias.asname
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for inner in node.body
        if isinstance(inner, ast.ImportFrom) and inner.module == "safebeat.record_rules"
        for alias in inner.names
        if alias.asname == alias.name
    }
    assert seen == set(safebeat.records._RULES)
