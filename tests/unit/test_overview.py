"""What `safebeat status` and the console say of a paused entry's next window."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from safebeat.ops.overview import EntryStatus, listed

NEXT = datetime(2026, 3, 2, 7, 0, tzinfo=timezone.utc)
ACTIVE = EntryStatus(
    name="report",
    schedule="every 60s",
    next_window=NEXT,
    last_window=None,
    last_sent=None,
    last_outcome=None,
    last_success=None,
    running_since=None,
    skipped_recently=0,
    paused=False,
)


@pytest.mark.parametrize(
    ("paused", "until", "skipped"),
    [
        (False, None, False),
        (True, None, True),  # paused until resumed
        (True, NEXT + timedelta(minutes=1), True),  # the pause ends after the window
        (True, NEXT, False),  # the pause ends at the window: it is sent
        (True, NEXT - timedelta(minutes=1), False),
    ],
)
def test_the_next_window_is_marked_skipped_only_inside_the_pause(
    paused: bool, until: datetime | None, skipped: bool
) -> None:
    status = replace(ACTIVE, paused=paused, paused_until=until)
    assert status.next_window_skipped is skipped


def test_an_unknown_next_window_is_not_marked() -> None:
    assert not replace(ACTIVE, paused=True, next_window=None).next_window_skipped


def test_a_message_lists_ten_names_and_counts_the_rest() -> None:
    """A store shared by many apps: the namespaces a message lists stop at ten."""
    names = [f"ns{i:03d}" for i in range(157)]
    assert listed(names) == ", ".join(repr(n) for n in names[:10]) + " and 147 more"
    assert listed(names[:3]) == "'ns000', 'ns001', 'ns002'"


def test_the_namespaces_like_the_asked_one_are_listed_first() -> None:
    """A typo of a namespace puts the namespace it meant before the store's others."""
    from safebeat.ops.overview import closest_first

    names = ["alpha", "beta", "billing", "billing-eu", "zeta"]
    assert closest_first("biling", names)[:2] == ["billing", "billing-eu"]
    assert closest_first("nothing-like", names) == names
    assert closest_first("billing", []) == []
