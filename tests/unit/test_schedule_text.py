"""The schedule text the store keeps reads back into a rule with the same windows.

`safebeat plan` shows an entry's next windows as registered, from that text alone, so
every text `entries.describe` writes must read back to a rule that describes the same
way and has the same windows.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from celery.schedules import crontab, solar
from hypothesis import given, settings
from hypothesis import strategies as st

from safebeat import windows
from safebeat.config import Config
from safebeat.crontab import crontab as seconds_crontab
from safebeat.entries import compile_entry, describe
from safebeat.entries.text_reader import rule_from_text
from tests.unit.test_windows_properties import ZONES, crontabs

UTC = timezone.utc
START = datetime(2026, 3, 1, tzinfo=UTC)


class Clocked:
    """A one-off schedule, as django-celery-beat's `clocked` is."""

    def __init__(self, at: datetime) -> None:
        self.clocked_time = at


SCHEDULES = st.one_of(
    crontabs(),
    st.builds(
        seconds_crontab,
        second=st.sampled_from(["*/15", "0,30", "7", "*"]),
        minute=st.sampled_from(["*", "0", "*/5"]),
        hour=st.sampled_from(["*", "1-3", "9"]),
    ),
    st.floats(0.001, 10**6).map(lambda s: round(s, 3)),
    st.timedeltas(timedelta(microseconds=1), timedelta(days=400)),
    st.builds(
        Clocked, st.datetimes(datetime(2000, 1, 1), datetime(2035, 1, 1), timezones=st.just(UTC))
    ),
)
BOUNDS = st.one_of(
    st.just({}),
    st.fixed_dictionaries(
        {"start": st.just("2026-03-01T09:30:00+01:00")},
        optional={"end": st.just("2026-06-01T00:00:00Z")},
    ),
    st.fixed_dictionaries({"end": st.just("2026-04-01T00:00:00.5+00:00")}),
)


@settings(max_examples=200, deadline=None)
@given(
    schedule=SCHEDULES,
    zone=st.sampled_from(ZONES),
    bounds=BOUNDS,
    relative=st.booleans(),
)
def test_described_text_reads_back_to_the_same_windows(
    schedule: object, zone: str, bounds: dict[str, str], relative: bool
) -> None:
    """rule_from_text(describe(rule)) describes the same and gives the same next windows."""
    raw = {"task": "t", "schedule": schedule, "relative": relative}
    raw["options"] = {"safebeat": bounds}
    rule = compile_entry("job", raw, app_timezone=ZoneInfo(zone), config=Config()).rule
    text = describe(rule)
    again = rule_from_text(text)
    assert again is not None, text
    assert describe(again) == text
    anchor = START
    for after in (START - timedelta(days=40), START, START + timedelta(days=3, seconds=7)):
        assert windows.next_window(again, after, anchor) == windows.next_window(
            rule, after, anchor
        ), text


def test_solar_text_reads_back() -> None:
    """A solar entry's text (event and place, exactly) reads back to the same rule."""
    raw = {"task": "t", "schedule": solar("sunset", 52.52, 13.405)}
    rule = compile_entry("job", raw, app_timezone=UTC, config=Config()).rule
    assert rule_from_text(describe(rule)) == rule


@pytest.mark.parametrize(
    "text",
    [
        "exec crontab 0 3 * * * in UTC",
        "apscheduler cron[hour='3']",
        "crontab 0 3 * * * in Mars/Olympus_Mons",
        "crontab 0 99 * * * in UTC",
        "every soon",
        "solar eclipse at 1,2",
        "",
    ],
)
def test_text_describe_never_writes_reads_as_none(text: str) -> None:
    """Text from `safebeat exec`, APScheduler or anything unknown gives no rule, no error."""
    assert rule_from_text(text) is None


def test_a_plain_crontab_reads_back_as_celerys() -> None:
    """`crontab 0 3 * * * in UTC` is Celery's crontab(minute=0, hour=3) in UTC."""
    raw = {"task": "t", "schedule": crontab(minute=0, hour=3)}
    rule = compile_entry("job", raw, app_timezone=UTC, config=Config()).rule
    assert rule_from_text("crontab 0 3 * * * in UTC") == rule
