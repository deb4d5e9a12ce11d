"""Crontabs with seconds (`safebeat.crontab.crontab(second=...)`) across clock changes.

The same promise as on the minute (DESIGN.md, point 3), checked with the same oracle as
tests/unit/test_dst.py: a slot in the spring-forward gap fires at the first instant after
it, a slot the wall clock shows twice fires once, at its first showing.
"""

from __future__ import annotations

import itertools
import pickle
from datetime import date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from celery.schedules import crontab as celery_crontab
from hypothesis import given, settings
from hypothesis import strategies as st

from safebeat import windows
from safebeat.config import Config
from safebeat.crontab import crontab
from safebeat.entries import compile_entry
from safebeat.runners.cron import CronError, parse_schedule
from safebeat.windows import CrontabRule
from tests.unit.test_dst import ZONE_YEARS, slot_instant, transitions
from tests.unit.test_windows_properties import ZONES, instants

UTC = timezone.utc
US = timedelta(microseconds=1)


def compiled(schedule: object, zone: str) -> CrontabRule:
    """One replica's compilation of the shared `beat_schedule` item."""
    raw = {"task": "proj.tasks.job", "schedule": schedule}
    rule = compile_entry("job", raw, app_timezone=ZoneInfo(zone), config=Config()).rule
    assert isinstance(rule, CrontabRule)
    return rule


def slots_of(rule: CrontabRule, day: date) -> list[datetime]:
    if not rule.matches_day(day):
        return []
    return [
        datetime.combine(day, time(h, m, s))
        for h in rule.hours
        for m in rule.minutes
        for s in rule.seconds
    ]


def oracle(rule: CrontabRule, days: list[date]) -> list[datetime]:
    """The distinct instants of every slot of `days`, asking zoneinfo only."""
    return sorted({slot_instant(wall, rule.tz) for day in days for wall in slots_of(rule, day)})


SECOND_CRONTABS = {
    "every-20s-at-night": crontab(second="*/20", minute="*/10", hour="0-3,23"),
    "twice-a-minute-at-01-02": crontab(second="15,45", hour="1-2"),
    "every-second-of-02:30": crontab(second="*", minute=30, hour=2),
}


@pytest.mark.parametrize("rule_name", SECOND_CRONTABS)
@pytest.mark.parametrize(("zone", "year"), ZONE_YEARS)
def test_windows_around_each_clock_change_are_the_distinct_slot_instants(
    zone: str, year: int, rule_name: str
) -> None:
    """Around every transition of the year, the windows are exactly the slots' distinct instants."""
    tz = ZoneInfo(zone)
    rule = compiled(SECOND_CRONTABS[rule_name], zone)
    for moment in transitions(tz, year) or [datetime(year, 6, 1, tzinfo=UTC)]:
        middle = moment.astimezone(tz).date()
        days = [middle + timedelta(days=d) for d in range(-2, 3)]
        expected = oracle(rule, days)
        # Compare inside the middle three days: the oracle's edges may lack a gap's slots.
        low = datetime.combine(days[1], time(), tzinfo=tz).astimezone(UTC)
        high = datetime.combine(days[4], time(), tzinfo=tz).astimezone(UTC)
        got = list(windows.windows_between(rule, low - US, high - US))
        assert all(a < b for a, b in itertools.pairwise(got)), "windows must increase"
        assert got == [w for w in expected if low <= w < high], (rule_name, moment)
        # Counting by arithmetic agrees with walking, across the change.
        if got:
            assert windows.count_windows(rule, got[0], got[-1]) == len(got)


@st.composite
def second_crontabs(draw: st.DrawFn) -> crontab:
    """Crontabs with seconds, biased towards the night hours where clocks change."""
    values = st.lists(st.integers(0, 59), min_size=1, max_size=4, unique=True)
    second = draw(st.one_of(values, st.sampled_from(["*", "*/15", "0,30", "59"])))
    minute = draw(st.one_of(values, st.sampled_from(["*", "*/5", "0", "30"])))
    hour = draw(st.lists(st.sampled_from([0, 1, 2, 3, 12, 23]), min_size=1, max_size=3))
    return crontab(second=second, minute=minute, hour=hour)


@st.composite
def second_cases(draw: st.DrawFn) -> tuple[CrontabRule, datetime]:
    zone = draw(st.sampled_from(ZONES))
    return compiled(draw(second_crontabs()), zone), draw(instants(zone))


@settings(max_examples=200, deadline=None)
@given(case=second_cases())
def test_latest_and_next_with_seconds_bracket_every_instant(
    case: tuple[CrontabRule, datetime],
) -> None:
    """latest(t) <= t < next(t), with no window between, and both are slot instants."""
    rule, t = case
    latest = windows.latest_window(rule, t)
    following = windows.next_window(rule, t)
    assert latest is not None
    assert following is not None
    assert latest <= t < following
    assert windows.next_window(rule, latest) == following
    assert windows.latest_window(rule, following - US) == latest
    for window in (latest, following):
        local = window.astimezone(rule.tz).replace(tzinfo=None)
        days = [local.date() + timedelta(days=d) for d in (-1, 0)]
        assert window in oracle(rule, days), local


@st.composite
def counting_cases(draw: st.DrawFn) -> tuple[CrontabRule, datetime, datetime]:
    rule, first = draw(second_cases())
    return rule, first, first + draw(st.timedeltas(timedelta(0), timedelta(days=2)))


@settings(max_examples=100, deadline=None)
@given(case=counting_cases())
def test_count_with_seconds_matches_the_slot_by_slot_oracle(
    case: tuple[CrontabRule, datetime, datetime],
) -> None:
    """count_windows equals the distinct slot instants in the span, clock changes included."""
    rule, first, last = case
    day = first.astimezone(rule.tz).date() - timedelta(days=1)
    days = [day + timedelta(days=d) for d in range((last - first).days + 4)]
    expected = [w for w in oracle(rule, days) if first <= w <= last]
    assert windows.count_windows(rule, first, last) == len(expected)


def test_a_year_of_every_second_in_the_gap_hour_is_counted_exactly() -> None:
    """Every second of 02:00-02:59 in Berlin for 2024: the gap day's 3,600 slots are one window."""
    rule = compiled(crontab(second="*", minute="*", hour=2), "Europe/Berlin")
    first = windows.next_window(rule, datetime(2024, 1, 1, tzinfo=UTC) - timedelta(hours=2))
    last = windows.latest_window(rule, datetime(2024, 12, 31, 12, tzinfo=UTC))
    assert first is not None
    assert last is not None
    assert first.astimezone(rule.tz).date() == date(2024, 1, 1)
    assert last.astimezone(rule.tz).date() == date(2024, 12, 31)
    assert windows.count_windows(rule, first, last) == 366 * 3600 - 3599


def test_seconds_default_to_zero_so_the_crontab_is_celerys() -> None:
    """Without `second`, safebeat's crontab compiles, describes and digests as Celery's does."""
    ours = compile_entry(
        "job",
        {"task": "t", "schedule": crontab(minute=5, hour=3)},
        app_timezone=UTC,
        config=Config(),
    )
    celerys = compile_entry(
        "job",
        {"task": "t", "schedule": celery_crontab(minute=5, hour=3)},
        app_timezone=UTC,
        config=Config(),
    )
    assert ours.rule == celerys.rule
    assert (ours.schedule_text, ours.digest) == (celerys.schedule_text, celerys.digest)


def test_seconds_are_the_first_of_six_fields_in_the_described_schedule() -> None:
    """An entry with seconds is described with six fields, seconds first, and digests apart."""
    entry = compile_entry(
        "poll",
        {"task": "t", "schedule": crontab(second="*/15", minute=5, hour=3)},
        app_timezone=ZoneInfo("Europe/Berlin"),
        config=Config(),
    )
    assert entry.schedule_text == "crontab 0,15,30,45 5 3 * * * in Europe/Berlin"
    assert isinstance(entry.rule, CrontabRule)
    assert entry.rule.seconds == (0, 15, 30, 45)


def test_a_crontab_with_seconds_equals_only_one_with_the_same_seconds() -> None:
    """Equality and pickling keep the seconds, so a changed `second` is a changed schedule."""
    every_15 = crontab(second="*/15", minute=5)
    assert pickle.loads(pickle.dumps(every_15)) == every_15  # noqa: S301 - our own bytes
    assert every_15 != crontab(second="*/20", minute=5)
    assert celery_crontab(minute=5) != every_15
    assert crontab(minute=5) == celery_crontab(minute=5)


def test_a_bad_second_field_is_refused_like_a_bad_minute() -> None:
    """`second=60` is out of range: Celery's own parser says so."""
    with pytest.raises(ValueError, match="60"):
        crontab(second=60)


def test_stock_beat_is_refused_a_crontab_with_seconds() -> None:
    """A scheduler other than safebeat's would fire once a minute: `is_due` refuses, saying why."""
    with pytest.raises(TypeError, match=r"only safebeat's scheduler honours"):
        crontab(second="*/15").is_due(datetime.now(UTC))
    assert crontab(minute="*").is_due(datetime.now(UTC) - timedelta(minutes=2)).is_due


def test_exec_refuses_six_field_cron_text_naming_why() -> None:
    """cron and CronJobs start at most once a minute: `safebeat exec` refuses a seconds field."""
    with pytest.raises(CronError, match=r"6 fields.*seconds cannot be honoured"):
        parse_schedule("*/15 0 3 * * *", "UTC")
