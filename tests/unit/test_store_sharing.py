"""Equal values read from a store in one go become one object."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from safebeat.stores.sharing import Sharing

UTC = timezone.utc


def test_equal_values_become_the_first_one_seen() -> None:
    share = Sharing().shared
    first, again = datetime(2026, 3, 2, 6, 30, tzinfo=UTC), datetime(2026, 3, 2, 6, 30, tzinfo=UTC)
    assert first is not again
    assert share(first) is first
    assert share(again) is first
    text = "".join(["every ", "hour"])
    assert share(text) is text
    assert share("".join(["every ", "hour"])) is text
    assert share(None) is None


def test_equal_instants_in_other_zones_are_kept_apart() -> None:
    share = Sharing().shared
    utc = datetime(2026, 3, 2, 6, 30, tzinfo=UTC)
    plus_one = utc.astimezone(timezone(timedelta(hours=1)))
    assert share(utc) is utc
    assert share(plus_one) is plus_one
    assert str(share(plus_one)) == str(plus_one)


def test_equal_numbers_of_other_types_are_kept_apart() -> None:
    share = Sharing().shared
    assert share(1) == 1
    assert share(True) is True
    assert share(1.0).__class__ is float
