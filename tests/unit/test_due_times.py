"""`safebeat.due_times.DueTimes`: the scheduler's due entries without a scan of all of them.

Checked against the scan it replaces (`heapq.nsmallest` over every entry due), for any
sequence of sets, removals and looks.
"""

from __future__ import annotations

import heapq

from hypothesis import given
from hypothesis import strategies as st

from safebeat.beat.due_times import DueTimes

NAMES = st.sampled_from(["a", "b", "c", "d", "e"])
TIMES = st.integers(0, 6).map(float)
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), NAMES, TIMES),
        st.tuples(st.just("remove"), NAMES, TIMES),
        st.tuples(st.just("due"), st.integers(1, 4), TIMES),
    ),
    max_size=40,
)


def scanned(times: dict[str, float], now: float, limit: int) -> list[str]:
    """The scan the scheduler did before: most overdue first, ties by name."""
    due = sorted(name for name, at in times.items() if at <= now)
    return heapq.nsmallest(limit, due, key=lambda name: (times[name], name))


@given(start=st.dictionaries(NAMES, TIMES), steps=STEPS)
def test_answers_as_the_scan_of_every_entry(
    start: dict[str, float], steps: list[tuple[str, object, float]]
) -> None:
    model = dict(start)
    due = DueTimes(start)
    for action, what, at in steps:
        if action == "set":
            assert isinstance(what, str)
            model[what] = at
            due.set(what, at)
        elif action == "remove":
            assert isinstance(what, str)
            model.pop(what, None)
            due.remove(what)
        else:
            assert isinstance(what, int)
            assert due.due(at, what) == scanned(model, at, what)
        assert due.earliest() == min(model.values(), default=None)
        assert len(due) == len(model)


def test_entries_stay_due_until_their_time_is_set_again() -> None:
    """A tick that found the lock busy plans nothing: its entries are due at the next."""
    due = DueTimes({"a": 1.0, "b": 2.0, "c": 9.0})

    assert due.due(5.0, 10) == ["a", "b"]
    assert due.due(5.0, 1) == ["a"]
    due.set("a", 7.0)
    assert due.due(5.0, 10) == ["b"]
    assert due.due(8.0, 10) == ["b", "a"]
    assert due.earliest() == 2.0
