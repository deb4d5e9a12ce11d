"""Crontab windows across daylight-saving transitions, zone by zone and year by year.

The promise (DESIGN.md, point 3): a slot in the spring-forward gap fires at the first instant
after the gap, a slot in the repeated autumn hour fires once (its first occurrence), and every
other slot fires at its wall-clock time. The expected windows here come from an oracle that
only asks zoneinfo which wall-clock time each UTC instant shows.
"""

from __future__ import annotations

import itertools
from datetime import date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from celery.schedules import crontab

from safebeat import windows
from safebeat.config import Config
from safebeat.entries import compile_entry
from safebeat.windows import CrontabRule

UTC = timezone.utc
US = timedelta(microseconds=1)
SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)

CRONTABS = {
    "daily-02:30": crontab(minute=30, hour=2),
    "hourly": crontab(minute=0),
    "quarterly-01-03": crontab(minute="*/15", hour="1-3"),
    "around-midnight": crontab(minute="0,30", hour="0,23"),
}
# Years in which each zone changes its clocks in a way worth testing.
ZONE_YEARS = [
    ("Europe/Berlin", 2024),  # 02:00 -> 03:00 in March, 03:00 -> 02:00 in October
    ("America/New_York", 2024),  # 02:00 -> 03:00 in March, 02:00 -> 01:00 in November
    ("Australia/Lord_Howe", 2024),  # 30-minute shifts: 02:00 -> 02:30, 02:00 -> 01:30
    ("America/Sao_Paulo", 2018),  # midnight DST: 00:00 -> 01:00 on 4 November
    ("America/Sao_Paulo", 2019),  # 00:00 -> 23:00 the day before, on 17 February
    ("Pacific/Apia", 2011),  # 30 December 2011 never happened there
    ("Europe/Moscow", 2011),  # last spring-forward, then permanent UTC+4
    ("Europe/Moscow", 2014),  # back to UTC+3 for good: 02:00 -> 01:00 on 26 October
    ("Asia/Kolkata", 2024),  # no transitions at all
    ("UTC", 2024),
]


def compiled_rule(name: str, zone: str) -> CrontabRule:
    """Build the rule the way every replica does: from Celery's crontab and the app zone."""
    raw = {"task": "proj.tasks.job", "schedule": CRONTABS[name]}
    rule = compile_entry(name, raw, app_timezone=ZoneInfo(zone), config=Config()).rule
    assert isinstance(rule, CrontabRule)
    return rule


def wall_clock(instant: datetime, tz: ZoneInfo) -> datetime:
    return instant.astimezone(tz).replace(tzinfo=None)


def slot_instant(wall: datetime, tz: ZoneInfo) -> datetime:
    """The promised instant of a wall-clock slot: the first instant whose wall clock reaches it.

    A slot shown once is that instant; a repeated slot is its first occurrence; a slot in a
    gap is the first instant after the gap (the wall clock jumps past it there).
    """
    shown = [
        candidate
        for candidate in (wall.replace(tzinfo=tz, fold=f).astimezone(UTC) for f in (0, 1))
        if wall_clock(candidate, tz) == wall
    ]
    if shown:
        return min(shown)
    # In a gap: walk forward a minute, then a second, at a time until the wall clock passes it.
    instant = min(wall.replace(tzinfo=tz, fold=f).astimezone(UTC) for f in (0, 1))
    while wall_clock(instant, tz) < wall:
        instant += MINUTE
    instant -= MINUTE
    while wall_clock(instant, tz) < wall:
        instant += SECOND
    return instant


def days_of(year: int) -> list[date]:
    first = date(year, 1, 1)
    return [first + timedelta(days=n) for n in range((date(year + 1, 1, 1) - first).days)]


def slots_of(rule: CrontabRule, day: date) -> list[datetime]:
    if not rule.matches_day(day):
        return []
    return [datetime.combine(day, time(h, m)) for h in rule.hours for m in rule.minutes]


def windows_of_year(rule: CrontabRule, year: int, tz: ZoneInfo) -> list[datetime]:
    start = datetime(year, 1, 1, tzinfo=tz).astimezone(UTC)
    end = datetime(year + 1, 1, 1, tzinfo=tz).astimezone(UTC)
    found = []
    window = windows.next_window(rule, start - US)
    while window is not None and window < end:
        found.append(window)
        window = windows.next_window(rule, window)
    return found


def transitions(tz: ZoneInfo, year: int) -> list[datetime]:
    """The UTC instants in `year` at which the zone's offset changes (to the minute)."""
    found = []
    hour = datetime(year, 1, 1, tzinfo=UTC)
    while hour.year == year:
        following = hour + timedelta(hours=1)
        if hour.astimezone(tz).utcoffset() != following.astimezone(tz).utcoffset():
            instant = hour
            while instant.astimezone(tz).utcoffset() == hour.astimezone(tz).utcoffset():
                instant += MINUTE
            found.append(instant)
        hour = following
    return found


@pytest.mark.parametrize("rule_name", CRONTABS)
@pytest.mark.parametrize(("zone", "year"), ZONE_YEARS)
def test_a_year_of_windows_has_one_window_per_distinct_slot_instant(
    zone: str, year: int, rule_name: str
) -> None:
    """Over a whole year each local day's slots yield exactly their distinct instants, in order."""
    tz = ZoneInfo(zone)
    rule = compiled_rule(rule_name, zone)
    got = windows_of_year(rule, year, tz)
    assert all(a < b for a, b in itertools.pairwise(got)), "windows must increase"
    got_set = set(got)
    expected: set[datetime] = set()
    for day in days_of(year):
        day_instants = {slot_instant(wall, tz) for wall in slots_of(rule, day)}
        if day == date(year, 12, 31):
            # The last day's slots may be pushed into next year by a gap; the loop stops there.
            day_instants = {i for i in day_instants if i < datetime(year + 1, 1, 1, tzinfo=tz)}
        missing = day_instants - got_set
        assert not missing, f"{day}: slots never fired at {sorted(missing)}"
        expected |= day_instants
    assert not got_set - expected, f"windows that are no slot: {sorted(got_set - expected)}"
    assert len(got) == len(expected)


@pytest.mark.parametrize(
    ("zone", "cron", "day_before", "expected"),
    [
        # Berlin: 02:00 CET -> 03:00 CEST at 01:00 UTC.
        ("Europe/Berlin", crontab(minute=30, hour=2), date(2024, 3, 30), datetime(2024, 3, 31, 1)),
        # New York: 02:00 EST -> 03:00 EDT at 07:00 UTC.
        (
            "America/New_York",
            crontab(minute=30, hour=2),
            date(2024, 3, 9),
            datetime(2024, 3, 10, 7),
        ),
        # Lord Howe: 02:00 (+10:30) -> 02:30 (+11) at 15:30 UTC the day before.
        (
            "Australia/Lord_Howe",
            crontab(minute=15, hour=2),
            date(2024, 10, 5),
            datetime(2024, 10, 5, 15, 30),
        ),
        # Sao Paulo: midnight 00:00 (-03) -> 01:00 (-02) at 03:00 UTC.
        (
            "America/Sao_Paulo",
            crontab(minute=30, hour=0),
            date(2018, 11, 3),
            datetime(2018, 11, 4, 3),
        ),
        # Apia: 29 Dec 2011 24:00 (-10) -> 31 Dec 00:00 (+14) at 10:00 UTC on the 30th.
        (
            "Pacific/Apia",
            crontab(minute=30, hour=2),
            date(2011, 12, 29),
            datetime(2011, 12, 30, 10),
        ),
        # Moscow: 02:00 (+3) -> 03:00 (+4) at 23:00 UTC the day before.
        (
            "Europe/Moscow",
            crontab(minute=30, hour=2),
            date(2011, 3, 26),
            datetime(2011, 3, 26, 23),
        ),
    ],
)
def test_slot_in_spring_gap_fires_at_the_transition_instant(
    zone: str, cron: crontab, day_before: date, expected: datetime
) -> None:
    """A daily slot that does not exist on the gap day fires once, at the end of the gap."""
    tz = ZoneInfo(zone)
    raw = {"task": "proj.tasks.job", "schedule": cron}
    rule = compile_entry("gap", raw, app_timezone=tz, config=Config()).rule
    transition = expected.replace(tzinfo=UTC)
    assert transition.astimezone(tz).utcoffset() != (transition - SECOND).astimezone(tz).utcoffset()
    noon_before = datetime.combine(day_before, time(12), tzinfo=tz).astimezone(UTC)
    assert windows.next_window(rule, noon_before) == transition
    assert windows.latest_window(rule, transition) == transition
    before_gap = windows.latest_window(rule, transition - US)
    assert before_gap is not None
    assert before_gap < noon_before
    # The day after the gap, the slot is back on its wall-clock time.
    after_gap = windows.next_window(rule, transition)
    assert after_gap is not None
    local = after_gap.astimezone(tz)
    assert local.date() == day_before + timedelta(days=2)
    slot = cron.minute, cron.hour
    assert ({local.minute}, {local.hour}) == slot


@pytest.mark.parametrize(
    ("zone", "cron", "first", "second"),
    [
        # Berlin: 03:00 CEST -> 02:00 CET; 02:30 shows twice, at 00:30 and 01:30 UTC.
        (
            "Europe/Berlin",
            crontab(minute=30, hour=2),
            datetime(2024, 10, 27, 0, 30),
            datetime(2024, 10, 27, 1, 30),
        ),
        # New York: 02:00 EDT -> 01:00 EST; 01:30 shows at 05:30 and 06:30 UTC.
        (
            "America/New_York",
            crontab(minute=30, hour=1),
            datetime(2024, 11, 3, 5, 30),
            datetime(2024, 11, 3, 6, 30),
        ),
        # Lord Howe: 02:00 (+11) -> 01:30 (+10:30); 01:45 shows at 14:45 and 15:15 UTC.
        (
            "Australia/Lord_Howe",
            crontab(minute=45, hour=1),
            datetime(2024, 4, 6, 14, 45),
            datetime(2024, 4, 6, 15, 15),
        ),
        # Sao Paulo: 00:00 (-02) -> 23:00 (-03) the day before; 23:30 on 16 February twice.
        (
            "America/Sao_Paulo",
            crontab(minute=30, hour=23),
            datetime(2019, 2, 17, 1, 30),
            datetime(2019, 2, 17, 2, 30),
        ),
        # Moscow: 02:00 (+4) -> 01:00 (+3); 01:30 shows at 21:30 and 22:30 UTC.
        (
            "Europe/Moscow",
            crontab(minute=30, hour=1),
            datetime(2014, 10, 25, 21, 30),
            datetime(2014, 10, 25, 22, 30),
        ),
    ],
)
def test_slot_in_repeated_hour_fires_once_at_its_first_occurrence(
    zone: str, cron: crontab, first: datetime, second: datetime
) -> None:
    """A slot the wall clock shows twice fires at the first showing only, seen from anywhere."""
    tz = ZoneInfo(zone)
    first, second = first.replace(tzinfo=UTC), second.replace(tzinfo=UTC)
    assert wall_clock(first, tz) == wall_clock(second, tz)
    raw = {"task": "proj.tasks.job", "schedule": cron}
    rule = compile_entry("fold", raw, app_timezone=tz, config=Config()).rule
    day_start = first - timedelta(hours=12)
    found = list(windows.windows_between(rule, day_start, day_start + timedelta(hours=24)))
    assert found == [first]
    # From inside the repeat (between and after the two showings) the latest is the first.
    for now in (first, first + MINUTE, second - US, second, second + timedelta(minutes=20)):
        assert windows.latest_window(rule, now) == first, now
        upcoming = windows.next_window(rule, now)
        assert upcoming is not None
        assert upcoming > second
        assert upcoming - first > timedelta(hours=23)


@pytest.mark.parametrize(("zone", "year"), ZONE_YEARS)
def test_latest_and_next_agree_with_the_oracle_around_transitions(zone: str, year: int) -> None:
    """Around each transition, `latest_window(t)` and `next_window(t)` bracket t on the oracle."""
    tz = ZoneInfo(zone)
    moments = transitions(tz, year) or [datetime(year, 6, 1, tzinfo=UTC)]
    for rule_name in ("hourly", "quarterly-01-03", "around-midnight"):
        rule = compiled_rule(rule_name, zone)
        for moment in moments:
            days = [moment.astimezone(tz).date() + timedelta(days=d) for d in range(-3, 4)]
            oracle = sorted({slot_instant(w, tz) for day in days for w in slots_of(rule, day)})
            t = moment - timedelta(hours=30)
            while t < moment + timedelta(hours=30):
                earlier = [w for w in oracle if w <= t]
                later = [w for w in oracle if w > t]
                assert windows.latest_window(rule, t) == earlier[-1], (rule_name, t)
                assert windows.next_window(rule, t) == later[0], (rule_name, t)
                t += timedelta(minutes=7, seconds=13)


@pytest.mark.parametrize(
    ("zone", "year", "count"),
    [
        ("Europe/Berlin", 2024, 366 * 24 - 1),  # the 02:00 slot merges into 03:00 in March
        ("America/New_York", 2024, 366 * 24 - 1),
        ("Asia/Kolkata", 2024, 366 * 24),
        ("UTC", 2024, 366 * 24),
        # A 30-minute gap moves 02:00 to 02:30 without losing it.
        ("Australia/Lord_Howe", 2024, 366 * 24),
        # 30 December is skipped: its 24 slots and 31 December's 00:00 collapse into one
        # window at the transition; the September spring-forward merges one more pair.
        ("Pacific/Apia", 2011, 365 * 24 - 24 - 1),
    ],
)
def test_hourly_rule_counts_per_year(zone: str, year: int, count: int) -> None:
    """An hourly rule fires once per distinct slot instant: gaps merge slots, repeats add none."""
    tz = ZoneInfo(zone)
    assert len(windows_of_year(compiled_rule("hourly", zone), year, tz)) == count


def test_apia_skipped_day_fires_its_daily_slot_at_the_start_of_the_next_day() -> None:
    """Apia's vanished 30 December 2011 fires its 02:30 slot once, at 31 December 00:00."""
    tz = ZoneInfo("Pacific/Apia")
    rule = compiled_rule("daily-02:30", "Pacific/Apia")
    start = datetime(2011, 12, 28, tzinfo=tz).astimezone(UTC)
    end = datetime(2012, 1, 1, 12, tzinfo=tz).astimezone(UTC)
    local = [w.astimezone(tz) for w in windows.windows_between(rule, start, end)]
    assert [(w.month, w.day, w.hour, w.minute) for w in local] == [
        (12, 28, 2, 30),
        (12, 29, 2, 30),
        (12, 31, 0, 0),
        (12, 31, 2, 30),
        (1, 1, 2, 30),
    ]


def test_wall_to_instant_maps_gap_repeat_and_plain_times() -> None:
    """`wall_to_instant` sends gap times to the gap's end, repeats to the first showing."""
    tz = ZoneInfo("Europe/Berlin")
    assert windows.wall_to_instant(datetime(2024, 3, 31, 2, 30), tz) == datetime(
        2024, 3, 31, 1, tzinfo=UTC
    )
    assert windows.wall_to_instant(datetime(2024, 10, 27, 2, 30), tz) == datetime(
        2024, 10, 27, 0, 30, tzinfo=UTC
    )
    assert windows.wall_to_instant(datetime(2024, 7, 1, 2, 30), tz) == datetime(
        2024, 7, 1, 0, 30, tzinfo=UTC
    )
    lord_howe = ZoneInfo("Australia/Lord_Howe")
    assert windows.wall_to_instant(datetime(2024, 10, 6, 2, 10), lord_howe) == datetime(
        2024, 10, 5, 15, 30, tzinfo=UTC
    )
