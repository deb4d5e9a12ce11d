"""Window math by example: each rule kind's windows and every missed-window policy of `due`.

All instants are explicit datetimes; nothing here reads a clock or sleeps.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import FrameType, SimpleNamespace
from zoneinfo import ZoneInfo

import ephem
import pytest
from celery.schedules import crontab, schedule, solar

from safebeat import windows
from safebeat.config import Config
from safebeat.entries import compile_entry, describe
from safebeat.windows import (
    MAX_COUNTED_DAYS,
    SKIP_DEFAULT_GRACE,
    ClockedRule,
    CrontabRule,
    Due,
    IntervalRule,
    Misfire,
    Policy,
    Rule,
    SkippedSpan,
    SkipReason,
    SolarRule,
)

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
KOLKATA = ZoneInfo("Asia/Kolkata")
US = timedelta(microseconds=1)
MINUTE = timedelta(minutes=1)
TROMSO = (69.65, 18.96)
BERLIN_PLACE = (52.52, 13.405)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def compiled(schedule_value: object, *, zone: ZoneInfo = BERLIN, **extra: object) -> Rule:
    """Compile a `beat_schedule` item the way every replica does."""
    raw = {"task": "proj.tasks.job", "schedule": schedule_value, **extra}
    return compile_entry("job", raw, app_timezone=zone, config=Config()).rule


def every_window(
    rule: Rule, after: datetime, until: datetime, anchor: datetime | None = None
) -> list[datetime]:
    return list(windows.windows_between(rule, after, until, anchor))


# --- interval --------------------------------------------------------------------------------

MINUTELY = IntervalRule(MINUTE, anchor=utc(2024, 1, 1))


def test_interval_windows_sit_on_the_anchor_grid() -> None:
    """Interval windows are `anchor + k*every`, whatever instant the question is asked at."""
    rule = IntervalRule(timedelta(minutes=10), anchor=utc(2024, 1, 1, 0, 3, 7))
    now = utc(2024, 5, 5, 12, 0, 0)
    assert windows.latest_window(rule, now) == utc(2024, 5, 5, 11, 53, 7)
    assert windows.next_window(rule, now) == utc(2024, 5, 5, 12, 3, 7)
    assert every_window(rule, now, now + timedelta(minutes=30)) == [
        utc(2024, 5, 5, 12, 3, 7),
        utc(2024, 5, 5, 12, 13, 7),
        utc(2024, 5, 5, 12, 23, 7),
    ]


def test_interval_instant_on_a_window_is_its_own_latest_and_not_its_next() -> None:
    """An instant exactly on a window is the latest window, and the next one is a period later."""
    rule = IntervalRule(timedelta(hours=1), anchor=utc(2024, 1, 1, 0, 30))
    on_window = utc(2024, 3, 3, 7, 30)
    assert windows.latest_window(rule, on_window) == on_window
    assert windows.next_window(rule, on_window) == utc(2024, 3, 3, 8, 30)
    assert windows.latest_window(rule, on_window - US) == utc(2024, 3, 3, 6, 30)
    assert windows.next_window(rule, on_window - US) == on_window


def test_interval_grid_extends_before_the_anchor() -> None:
    """Windows exist for negative k too, so instants before the anchor still get grid windows."""
    rule = IntervalRule(timedelta(minutes=7), anchor=utc(2024, 1, 1, 12, 0))
    before = utc(2024, 1, 1, 11, 50)
    assert windows.latest_window(rule, before) == utc(2024, 1, 1, 11, 46)
    assert windows.next_window(rule, before) == utc(2024, 1, 1, 11, 53)


def test_interval_with_fractional_seconds_has_no_float_drift() -> None:
    """A 0.1 s or 1.5 s period lands on exact microseconds, even a million periods out."""
    tenth = IntervalRule(timedelta(seconds=0.1), anchor=utc(2024, 1, 1, 0, 0, 0))
    far = utc(2024, 1, 1) + 1_000_000 * timedelta(milliseconds=100)
    assert windows.latest_window(tenth, far + timedelta(milliseconds=99)) == far
    assert windows.next_window(tenth, far) == far + timedelta(milliseconds=100)

    anchor = utc(2024, 1, 1) + timedelta(milliseconds=250)
    rule = compiled(1.5)
    assert rule == IntervalRule(timedelta(seconds=1.5))
    got = every_window(rule, anchor - US, anchor + timedelta(seconds=6), anchor)
    assert got == [anchor + k * timedelta(microseconds=1_500_000) for k in range(5)]
    assert got[1] == utc(2024, 1, 1, 0, 0, 1) + timedelta(milliseconds=750)


def test_relative_interval_is_anchored_at_the_epoch() -> None:
    """`relative=True` (on the entry or on `schedule`) anchors windows at the Unix epoch."""
    epoch = utc(1970, 1, 1)
    for rule in (
        compiled(300, relative=True),
        compiled(schedule(timedelta(hours=1), relative=True)),
    ):
        assert isinstance(rule, IntervalRule)
        assert rule.anchor == epoch
    five_minutes = compiled(300, relative=True)
    hourly = compiled(schedule(timedelta(hours=1), relative=True))
    now = utc(2024, 5, 5, 12, 1, 30)
    assert windows.latest_window(five_minutes, now) == utc(2024, 5, 5, 12, 0)
    assert windows.next_window(five_minutes, now) == utc(2024, 5, 5, 12, 5)
    assert windows.next_window(hourly, now) == utc(2024, 5, 5, 13, 0)
    assert describe(five_minutes) == "every 300s from 1970-01-01T00:00:00Z"


def test_plain_interval_needs_the_store_anchor() -> None:
    """A non-relative interval has no anchor of its own; the store's anchor places its windows."""
    rule = compiled(timedelta(minutes=5))
    assert rule == IntervalRule(timedelta(minutes=5), anchor=None)
    with pytest.raises(ValueError, match="anchor"):
        windows.next_window(rule, utc(2024, 1, 1))
    store_anchor = utc(2024, 1, 1, 0, 0, 42)
    assert windows.next_window(rule, utc(2024, 6, 1, 12, 1), store_anchor) == utc(
        2024, 6, 1, 12, 5, 42
    )
    assert describe(rule) == "every 300s"


def test_rule_anchor_takes_precedence_over_the_store_anchor() -> None:
    """An entry with its own anchor (relative, a start time) ignores the persisted one."""
    rule = IntervalRule(timedelta(minutes=10), anchor=utc(2024, 1, 1, 0, 1))
    store_anchor = utc(2024, 1, 1, 0, 7)
    assert windows.next_window(rule, utc(2024, 2, 2, 9, 0), store_anchor) == utc(2024, 2, 2, 9, 1)


@pytest.mark.parametrize("every", [timedelta(0), timedelta(seconds=-5)])
def test_interval_must_be_positive(every: timedelta) -> None:
    """A zero or negative period is rejected when the rule is built."""
    with pytest.raises(ValueError, match="positive"):
        IntervalRule(every, anchor=utc(2024, 1, 1))


# --- crontab ---------------------------------------------------------------------------------


def test_crontab_latest_and_next_in_utc() -> None:
    """A weekday rule finds Friday's last slot and Monday's first slot across a weekend."""
    rule = compiled(
        crontab(minute="*/15", hour="9-17", day_of_week="mon-fri"), zone=ZoneInfo("UTC")
    )
    saturday = utc(2024, 6, 8, 10, 7)
    assert windows.latest_window(rule, saturday) == utc(2024, 6, 7, 17, 45)
    assert windows.next_window(rule, saturday) == utc(2024, 6, 10, 9, 0)
    tuesday = utc(2024, 6, 11, 12, 29, 59)
    assert windows.latest_window(rule, tuesday) == utc(2024, 6, 11, 12, 15)
    assert windows.next_window(rule, tuesday) == utc(2024, 6, 11, 12, 30)


def test_crontab_slot_instant_is_its_own_latest() -> None:
    """At exactly a slot's instant that slot is the latest window and the next is the one after."""
    rule = compiled(crontab(minute=0, hour="*/6"), zone=ZoneInfo("UTC"))
    slot = utc(2024, 2, 29, 18, 0)
    assert windows.latest_window(rule, slot) == slot
    assert windows.latest_window(rule, slot - US) == utc(2024, 2, 29, 12, 0)
    assert windows.next_window(rule, slot) == utc(2024, 3, 1, 0, 0)


@pytest.mark.parametrize(
    ("zone", "now", "latest", "upcoming"),
    [
        # Berlin is UTC+1 in winter and UTC+2 in summer.
        (BERLIN, utc(2024, 1, 15, 12), utc(2024, 1, 15, 8), utc(2024, 1, 16, 8)),
        (BERLIN, utc(2024, 7, 15, 12), utc(2024, 7, 15, 7), utc(2024, 7, 16, 7)),
        # New York is UTC-5 in winter and UTC-4 in summer.
        (NEW_YORK, utc(2024, 1, 15, 12), utc(2024, 1, 14, 14), utc(2024, 1, 15, 14)),
        (NEW_YORK, utc(2024, 7, 15, 14), utc(2024, 7, 15, 13), utc(2024, 7, 16, 13)),
        # Kolkata is UTC+5:30 all year.
        (KOLKATA, utc(2024, 7, 15, 3, 29), utc(2024, 7, 14, 3, 30), utc(2024, 7, 15, 3, 30)),
    ],
)
def test_crontab_slots_follow_the_zone_offset(
    zone: ZoneInfo, now: datetime, latest: datetime, upcoming: datetime
) -> None:
    """ "9:00 every day" is 9:00 on the zone's wall clock, whatever its offset that day."""
    rule = compiled(crontab(minute=0, hour=9), zone=zone)
    assert windows.latest_window(rule, now) == latest
    assert windows.next_window(rule, now) == upcoming
    assert latest.astimezone(zone).hour == 9
    assert upcoming.astimezone(zone).hour == 9


def test_entry_timezone_overrides_the_app_timezone() -> None:
    """`options.safebeat.timezone` puts the rule on that zone's wall clock, not `app.timezone`."""
    raw = {
        "task": "proj.tasks.job",
        "schedule": crontab(minute=0, hour=9),
        "options": {"safebeat": {"timezone": "Asia/Kolkata"}},
    }
    rule = compile_entry("job", raw, app_timezone=BERLIN, config=Config()).rule
    assert isinstance(rule, CrontabRule)
    assert windows.next_window(rule, utc(2024, 7, 15)) == utc(2024, 7, 15, 3, 30)
    assert describe(rule) == "crontab 0 9 * * * in Asia/Kolkata"


def test_crontab_day_of_month_and_day_of_week_must_both_match() -> None:
    """Like Celery, day-of-month and day-of-week are ANDed: "0 0 13 * 5" is Friday the 13th."""
    rule = compiled(crontab(minute=0, hour=0, day_of_month=13, day_of_week=5), zone=ZoneInfo("UTC"))
    assert every_window(rule, utc(2024, 1, 1), utc(2025, 1, 1)) == [
        utc(2024, 9, 13),
        utc(2024, 12, 13),
    ]


def test_crontab_that_never_matches_has_no_windows() -> None:
    """February 30th never comes: no latest, no next, and `due` says nothing will ever be due."""
    rule = CrontabRule(
        (0,), (0,), frozenset(range(7)), frozenset({30}), frozenset({2}), ZoneInfo("UTC")
    )
    now = utc(2024, 3, 1)
    assert windows.latest_window(rule, now) is None
    assert windows.next_window(rule, now) is None
    assert windows.due(rule, after=now - timedelta(days=400), now=now, policy=Policy()) == (
        windows.Due((), (), None)
    )


def test_equal_crontab_text_means_equal_windows() -> None:
    """Two spellings of one schedule describe the same; another zone describes differently."""
    one = compiled(crontab(minute="0,30", hour="8-10"))
    other = compiled(crontab(minute="*/30", hour="8,9,10"))
    in_new_york = compiled(crontab(minute="0,30", hour="8-10"), zone=NEW_YORK)
    assert describe(one) == describe(other) == "crontab 0,30 8-10 * * * in Europe/Berlin"
    assert one == other
    assert describe(in_new_york) != describe(one)
    start = utc(2024, 5, 1)
    assert every_window(one, start, start + timedelta(days=2)) == every_window(
        other, start, start + timedelta(days=2)
    )


# --- solar -----------------------------------------------------------------------------------


def _sun_altitude_degrees(place: tuple[float, float], instant: datetime) -> float:
    observer = ephem.Observer()
    observer.lat, observer.lon = str(place[0]), str(place[1])
    observer.elev, observer.pressure = 0, 0
    observer.date = ephem.Date(instant.astimezone(UTC).replace(tzinfo=None))
    return math.degrees(float(ephem.Sun(observer).alt))


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        # Berlin, midsummer 2024 (almanac: 04:43 / 13:08 / 21:33 CEST).
        ("sunrise", utc(2024, 6, 21, 2, 43)),
        ("solar_noon", utc(2024, 6, 21, 11, 8)),
        ("sunset", utc(2024, 6, 21, 19, 33)),
    ],
)
def test_solar_windows_are_the_event_instants_to_the_second(event: str, expected: datetime) -> None:
    """Solar windows are the event instants, whole seconds, within a minute of the almanac."""
    rule = compiled(solar(event, *BERLIN_PLACE))
    assert rule == SolarRule(event, *BERLIN_PLACE)
    window = windows.next_window(rule, utc(2024, 6, 21))
    assert window is not None
    assert window.microsecond == 0
    assert abs(window - expected) <= MINUTE
    assert windows.latest_window(rule, window) == window
    previous = windows.latest_window(rule, window - US)
    following = windows.next_window(rule, window)
    assert previous is not None
    assert following is not None
    assert timedelta(hours=23) < window - previous < timedelta(hours=25)
    assert timedelta(hours=23) < following - window < timedelta(hours=25)


# BUG (safebeat/windows/solar.py, solar rules): ephem's rising/setting search converges to within
# about 0.1 s of the event, and the exact result depends on the instant the search starts
# from. Rounding that to the second gives one sunset two identities when it lies near a
# half second: Berlin's sunset of 2024-06-04 is 19:23:07 asked at 19:23:08 and 19:23:08
# asked at 19:23:09, so consecutive ticks dispatch it twice. These two tests fail until
# every search re-solves the event from a start that depends only on the event's day.
BERLIN_SUNSET_JUNE_4 = SolarRule("sunset", *BERLIN_PLACE)


def test_solar_window_is_the_same_whenever_it_is_asked() -> None:
    """One sunset has one window, whichever instant after it `latest_window` is asked at."""
    rule = BERLIN_SUNSET_JUNE_4
    start = utc(2024, 6, 4, 19, 23, 7)
    seen = {
        windows.latest_window(rule, start + k * timedelta(milliseconds=250)) for k in range(240)
    }
    seen |= {
        windows.next_window(rule, utc(2024, 6, 4, 19, 23) - k * timedelta(minutes=17))
        for k in range(60)
    }
    assert len(seen) == 1, sorted(w for w in seen if w is not None)


def test_consecutive_ticks_dispatch_a_sunset_once() -> None:
    """Two ticks a second apart, sharing the decided state, dispatch the same sunset once."""
    rule = BERLIN_SUNSET_JUNE_4
    first = windows.due(
        rule, after=utc(2024, 6, 4, 19), now=utc(2024, 6, 4, 19, 23, 8), policy=Policy()
    )
    assert len(first.dispatch) == 1
    assert first.last_window is not None
    second = windows.due(
        rule, after=first.last_window, now=utc(2024, 6, 4, 19, 23, 9), policy=Policy()
    )
    assert second.dispatch == ()


def test_sunrise_and_sunset_are_where_the_sun_crosses_the_horizon() -> None:
    """At sunrise and sunset the sun's centre is 50' below the horizon, rising or setting."""
    place = BERLIN_PLACE
    rise = windows.next_window(SolarRule("sunrise", *place), utc(2024, 3, 20))
    dusk = windows.next_window(SolarRule("sunset", *place), utc(2024, 3, 20))
    noon = windows.next_window(SolarRule("solar_noon", *place), utc(2024, 3, 20))
    assert rise is not None
    assert dusk is not None
    assert noon is not None
    assert rise < noon < dusk
    for instant in (rise, dusk):
        assert _sun_altitude_degrees(place, instant) == pytest.approx(-50 / 60, abs=0.05)
    assert _sun_altitude_degrees(place, rise + MINUTE) > _sun_altitude_degrees(place, rise)
    assert _sun_altitude_degrees(place, dusk + MINUTE) < _sun_altitude_degrees(place, dusk)
    peak = _sun_altitude_degrees(place, noon)
    assert peak > _sun_altitude_degrees(place, noon - timedelta(minutes=10))
    assert peak > _sun_altitude_degrees(place, noon + timedelta(minutes=10))


def test_polar_night_sunrise_is_weeks_away() -> None:
    """In Tromsø's polar night the next sunrise is in mid-January and none happens before it."""
    rule = compiled(solar("sunrise", *TROMSO))
    december = utc(2024, 12, 1)
    upcoming = windows.next_window(rule, december)
    latest = windows.latest_window(rule, december)
    assert upcoming is not None
    assert latest is not None
    assert utc(2025, 1, 13) <= upcoming <= utc(2025, 1, 18)
    assert utc(2024, 11, 24) <= latest <= utc(2024, 11, 28)
    assert windows.next_window(rule, latest) == upcoming
    assert windows.latest_window(rule, upcoming - US) == latest
    # Independent check: between the two, the sun never climbs to the horizon at noon.
    noon_rule = SolarRule("solar_noon", *TROMSO)
    noons = every_window(noon_rule, latest + timedelta(days=1), upcoming - timedelta(days=1))
    assert len(noons) >= 45
    assert all(_sun_altitude_degrees(TROMSO, noon) < -50 / 60 for noon in noons)


def test_polar_night_misfire_spans_weeks_without_sunrise() -> None:
    """Catching up over the polar night under `all` dispatches only the few real sunrises."""
    rule = SolarRule("sunrise", *TROMSO)
    got = windows.due(
        rule,
        after=utc(2024, 11, 20),
        now=utc(2025, 1, 17, 12),
        policy=Policy(Misfire.ALL, catchup_limit=1000),
    )
    assert list(got.dispatch) == every_window(rule, utc(2024, 11, 20), utc(2025, 1, 17, 12))
    autumn = [w for w in got.dispatch if w < utc(2024, 12, 1)]
    winter = [w for w in got.dispatch if w >= utc(2024, 12, 1)]
    assert autumn[0].date() == datetime(2024, 11, 20).date()
    assert 5 <= len(autumn) <= 9
    assert autumn[-1] <= utc(2024, 11, 28)
    assert 1 <= len(winter) <= 5
    assert winter[0] >= utc(2025, 1, 13)
    assert winter[0] - autumn[-1] > timedelta(days=45)
    assert got.skipped == ()
    assert got.next_window is not None
    assert got.next_window > utc(2025, 1, 17, 12)


def test_midnight_sun_has_no_sunset_for_weeks() -> None:
    """Under Tromsø's midnight sun the next sunset after June 1st is in late July."""
    rule = SolarRule("sunset", *TROMSO)
    upcoming = windows.next_window(rule, utc(2024, 6, 1))
    assert upcoming is not None
    assert utc(2024, 7, 22) <= upcoming <= utc(2024, 7, 28)
    noon = windows.next_window(SolarRule("solar_noon", *TROMSO), utc(2024, 6, 1))
    assert noon is not None
    assert noon < utc(2024, 6, 2)


# --- clocked ---------------------------------------------------------------------------------


def test_clocked_rule_has_exactly_one_window() -> None:
    """A one-off rule's only window is its instant: none before it, none after it."""
    at = utc(2024, 5, 1, 10, 0)
    rule = ClockedRule(at)
    assert windows.latest_window(rule, at - US) is None
    assert windows.latest_window(rule, at) == at
    assert windows.latest_window(rule, at + timedelta(days=999)) == at
    assert windows.next_window(rule, at - US) == at
    assert windows.next_window(rule, at) is None
    assert every_window(rule, at - timedelta(days=1), at + timedelta(days=1)) == [at]


def test_clocked_naive_time_is_read_in_the_entry_zone() -> None:
    """A django-celery-beat clocked time without a zone is wall-clock time in the entry's zone."""
    rule = compiled(SimpleNamespace(clocked_time=datetime(2024, 5, 1, 12, 0)))
    assert rule == ClockedRule(utc(2024, 5, 1, 10, 0))
    aware = compiled(SimpleNamespace(clocked_time=datetime(2024, 5, 1, 12, 0, tzinfo=NEW_YORK)))
    assert aware == ClockedRule(utc(2024, 5, 1, 16, 0))


def test_clocked_rule_dispatches_once_then_never_again() -> None:
    """`due` dispatches a one-off once; asked again after it, nothing is due and nothing follows."""
    at = utc(2024, 5, 1, 10, 0)
    rule = ClockedRule(at)
    first = windows.due(rule, after=at - MINUTE, now=at + timedelta(seconds=2), policy=Policy())
    assert first == Due((at,), (), None)
    again = windows.due(rule, after=at, now=at + timedelta(hours=1), policy=Policy())
    assert again == Due((), (), None)
    waiting = windows.due(rule, after=at - timedelta(hours=2), now=at - MINUTE, policy=Policy())
    assert waiting == Due((), (), at)


def test_clocked_time_before_registration_never_fires() -> None:
    """A one-off registered after its time is never a surprise dispatch at startup."""
    at = utc(2024, 5, 1, 10, 0)
    got = windows.due(
        ClockedRule(at), after=at + MINUTE, now=at + timedelta(hours=1), policy=Policy(Misfire.ALL)
    )
    assert got == Due((), (), None)


# --- due: the missed-window policies ----------------------------------------------------------
# MINUTELY has windows on every whole minute. With after=10:00 and now=10:10:30 the windows
# 10:01 ... 10:10 (ten of them) passed unseen; the newest, 10:10, is 30 s late.

AFTER = utc(2024, 3, 1, 10, 0)
NOW = utc(2024, 3, 1, 10, 10, 30)


def at(minute: int, second: int = 0) -> datetime:
    return utc(2024, 3, 1, 10, minute, second)


def span(first: int, last: int, reason: SkipReason) -> SkippedSpan:
    return SkippedSpan(at(first), at(last), last - first + 1, reason)


def test_nothing_due_before_the_first_window_passes() -> None:
    """Before any window passes `due` dispatches nothing and names the coming window."""
    got = windows.due(MINUTELY, after=AFTER, now=at(0, 59), policy=Policy())
    assert got == Due((), (), at(1))
    assert got.last_window is None


def test_registration_instant_fires_nothing_at_startup() -> None:
    """With `after` = the registration instant, a window just before it is not dispatched."""
    rule = compiled(crontab(minute="*/5"), zone=ZoneInfo("UTC"))
    registered = utc(2024, 3, 1, 10, 4, 59)
    got = windows.due(
        rule, after=registered, now=registered + timedelta(seconds=0.5), policy=Policy()
    )
    assert got == Due((), (), utc(2024, 3, 1, 10, 5))


def test_on_time_window_is_dispatched_under_every_policy() -> None:
    """A tick that sees one fresh window dispatches it, whatever the policy."""
    for policy in (
        Policy(Misfire.LATEST),
        Policy(Misfire.SKIP),
        Policy(Misfire.ALL),
        Policy(Misfire.LATEST, grace=timedelta(seconds=5)),
    ):
        got = windows.due(MINUTELY, after=at(0), now=at(1, 2), policy=policy)
        assert got == Due((at(1),), (), at(2)), policy


def test_latest_dispatches_only_the_newest_missed_window() -> None:
    """`latest` dispatches the newest window and records the older ones as one missed span."""
    got = windows.due(MINUTELY, after=AFTER, now=NOW, policy=Policy(Misfire.LATEST))
    assert got == Due((at(10),), (span(1, 9, SkipReason.MISSED),), at(11))
    assert got.last_window == at(10)


def test_latest_dispatches_the_newest_however_late_without_grace() -> None:
    """Without `grace`, `latest` dispatches the newest window even hours late (like stock beat)."""
    now = at(0) + timedelta(hours=5, seconds=1)
    got = windows.due(MINUTELY, after=AFTER, now=now, policy=Policy(Misfire.LATEST))
    assert got.dispatch == (at(0) + timedelta(hours=5),)
    assert got.skipped == (
        SkippedSpan(at(1), at(0) + timedelta(hours=4, minutes=59), 299, SkipReason.MISSED),
    )


def test_skip_has_a_default_grace_of_sixty_seconds() -> None:
    """Under `skip` without `grace` a window up to 60 s late still fires; older ones are late."""
    assert timedelta(seconds=60) == SKIP_DEFAULT_GRACE
    assert Policy(Misfire.SKIP).effective_grace == timedelta(seconds=60)
    assert Policy(Misfire.LATEST).effective_grace is None
    got = windows.due(MINUTELY, after=AFTER, now=NOW, policy=Policy(Misfire.SKIP))
    assert got == Due((at(10),), (span(1, 9, SkipReason.LATE),), at(11))


def test_skip_boundary_exactly_sixty_seconds_late_still_fires() -> None:
    """Exactly 60 s late is on time under `skip`; one microsecond more is late."""
    rule = IntervalRule(timedelta(minutes=5), anchor=at(0))
    policy = Policy(Misfire.SKIP)
    on_edge = windows.due(rule, after=at(0), now=at(6), policy=policy)
    assert on_edge == Due((at(5),), (), at(10))
    past_edge = windows.due(rule, after=at(0), now=at(6) + US, policy=policy)
    assert past_edge == Due((), (SkippedSpan(at(5), at(5), 1, SkipReason.LATE),), at(10))


def test_skip_resumes_at_the_next_future_window() -> None:
    """Under `skip`, when even the newest window is over 60 s late, every missed one is skipped."""
    rule = IntervalRule(timedelta(minutes=5), anchor=at(0))
    got = windows.due(rule, after=AFTER, now=at(16, 1), policy=Policy(Misfire.SKIP))
    assert got == Due((), (SkippedSpan(at(5), at(15), 3, SkipReason.LATE),), at(20))
    assert got.last_window == at(15)


def test_skip_with_explicit_grace_uses_that_grace() -> None:
    """`skip` with `grace=300` still dispatches a window four minutes late."""
    rule = IntervalRule(timedelta(minutes=10), anchor=at(0))
    policy = Policy(Misfire.SKIP, grace=timedelta(seconds=300))
    assert windows.due(rule, after=at(0), now=at(14), policy=policy) == Due((at(10),), (), at(20))
    late = windows.due(rule, after=at(0), now=at(15, 1), policy=policy)
    assert late == Due((), (SkippedSpan(at(10), at(10), 1, SkipReason.LATE),), at(20))


def test_all_dispatches_every_missed_window_oldest_first() -> None:
    """`all` dispatches each missed window, in order, and skips none."""
    got = windows.due(MINUTELY, after=AFTER, now=NOW, policy=Policy(Misfire.ALL))
    assert got == Due(tuple(at(m) for m in range(1, 11)), (), at(11))


def test_all_is_capped_by_catchup_limit() -> None:
    """`all` dispatches the newest `catchup_limit` windows and skips older ones for that reason."""
    policy = Policy(Misfire.ALL, catchup_limit=3)
    got = windows.due(MINUTELY, after=AFTER, now=NOW, policy=policy)
    assert got == Due((at(8), at(9), at(10)), (span(1, 7, SkipReason.CATCHUP_LIMIT),), at(11))


def test_all_with_grace_skips_the_late_windows() -> None:
    """`all` with `grace` dispatches only windows within the grace; older ones are late."""
    policy = Policy(Misfire.ALL, grace=timedelta(seconds=150))  # on time from 10:08:00
    got = windows.due(MINUTELY, after=AFTER, now=NOW, policy=policy)
    assert got == Due((at(8), at(9), at(10)), (span(1, 7, SkipReason.LATE),), at(11))


def test_all_with_grace_and_catchup_limit_reports_both_reasons() -> None:
    """Late windows come first, then those over the catch-up limit, then the dispatched ones."""
    policy = Policy(Misfire.ALL, grace=timedelta(seconds=300), catchup_limit=2)
    got = windows.due(MINUTELY, after=AFTER, now=NOW, policy=policy)  # on time from 10:05:30
    assert got == Due(
        (at(9), at(10)),
        (span(1, 5, SkipReason.LATE), span(6, 8, SkipReason.CATCHUP_LIMIT)),
        at(11),
    )


def test_latest_with_grace_splits_late_and_missed() -> None:
    """`latest` with `grace`: older windows beyond the grace are late, the rest within it missed."""
    policy = Policy(Misfire.LATEST, grace=timedelta(seconds=150))  # on time from 10:08:00
    got = windows.due(MINUTELY, after=AFTER, now=NOW, policy=policy)
    assert got == Due(
        (at(10),), (span(1, 7, SkipReason.LATE), span(8, 9, SkipReason.MISSED)), at(11)
    )


def test_latest_with_grace_dispatches_nothing_when_the_newest_is_late() -> None:
    """With `grace` the newest window is skipped as late once it is later than the grace."""
    policy = Policy(Misfire.LATEST, grace=timedelta(seconds=20))
    got = windows.due(MINUTELY, after=AFTER, now=NOW, policy=policy)
    assert got == Due((), (span(1, 10, SkipReason.LATE),), at(11))


def test_all_with_grace_dispatches_nothing_when_every_window_is_late() -> None:
    """`all` with a grace shorter than the newest window's lateness dispatches nothing."""
    policy = Policy(Misfire.ALL, grace=timedelta(seconds=10))
    got = windows.due(MINUTELY, after=AFTER, now=NOW, policy=policy)
    assert got == Due((), (span(1, 10, SkipReason.LATE),), at(11))


def test_decided_state_ahead_of_now_dispatches_nothing() -> None:
    """If the shared state is already past `now` (a stale clock read), nothing is due."""
    got = windows.due(MINUTELY, after=at(20), now=NOW, policy=Policy(Misfire.ALL))
    assert got == Due((), (), at(21))


def test_skipped_crontab_windows_are_counted_exactly_past_ten_thousand() -> None:
    """A week of missed minutely crontab windows is counted exactly, like an interval's."""
    minutely_cron = compiled(crontab(), zone=ZoneInfo("UTC"))
    after = utc(2024, 3, 1)
    now = after + timedelta(minutes=10_005, seconds=1)
    got = windows.due(minutely_cron, after=after, now=now, policy=Policy())
    newest = after + timedelta(minutes=10_005)
    assert got.dispatch == (newest,)
    assert got.skipped == (SkippedSpan(after + MINUTE, newest - MINUTE, 10_004, SkipReason.MISSED),)
    interval = IntervalRule(MINUTE, anchor=after)
    counted = windows.due(interval, after=after, now=now, policy=Policy())
    assert counted.skipped[0].count == 10_004


def test_skipped_crontab_count_is_unknown_past_the_counted_days() -> None:
    """A crontab span longer than MAX_COUNTED_DAYS reports count None instead of counting on."""
    daily = compiled(crontab(minute=0, hour=3), zone=BERLIN)
    after = utc(2020, 1, 1)
    now = after + timedelta(days=MAX_COUNTED_DAYS + 10)
    got = windows.due(daily, after=after, now=now, policy=Policy())
    assert [span.count for span in got.skipped] == [None]
    near = windows.due(daily, after=after, now=after + timedelta(days=300), policy=Policy())
    assert [span.count for span in near.skipped] == [299]  # 300 days, the newest sent


def window_math_calls(decide: Callable[[], object]) -> int:
    """How many Python function calls inside `safebeat.windows` one decision makes."""
    calls = 0
    package = str(Path(windows.__file__).parent)

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        nonlocal calls
        if event == "call" and str(Path(frame.f_code.co_filename).parent) == package:
            calls += 1

    sys.setprofile(profile)
    try:
        decide()
    finally:
        sys.setprofile(None)
    return calls


BACKLOG_RULES: dict[str, Rule] = {
    "minutely-crontab-utc": compiled(crontab(), zone=ZoneInfo("UTC")),
    "minutely-crontab-berlin": compiled(crontab(), zone=BERLIN),
    "secondly-interval": IntervalRule(timedelta(seconds=1), anchor=utc(2024, 1, 1)),
}


@pytest.mark.parametrize("rule_name", BACKLOG_RULES)
@pytest.mark.parametrize("misfire", list(Misfire))
@pytest.mark.parametrize("backlog", [timedelta(hours=12), timedelta(days=30)], ids=["12h", "30d"])
def test_a_long_backlog_is_planned_in_a_bounded_number_of_steps(
    rule_name: str, misfire: Misfire, backlog: timedelta
) -> None:
    """Deciding one entry after 12 h or 30 days of outage (a clock change included) takes a
    bounded number of steps, not one per missed window, so it fits inside a store transaction."""
    rule = BACKLOG_RULES[rule_name]
    now = utc(2024, 3, 31, 12, 0, 0, 500_000)  # Berlin's clocks went forward this morning
    policy = Policy(misfire)
    steps = window_math_calls(
        lambda: windows.due(rule, after=now - backlog, now=now, policy=policy, anchor=None)
    )
    assert steps < 2_000
    decision = windows.due(rule, after=now - backlog, now=now, policy=policy)
    first, newest = windows.next_window(rule, now - backlog), windows.latest_window(rule, now)
    assert first is not None
    assert newest is not None
    decided = len(decision.dispatch) + sum(span.count or 0 for span in decision.skipped)
    assert decided == windows.count_windows(rule, first, newest)


ACCOUNTING_RULES: dict[str, Rule] = {
    "interval-7s": IntervalRule(timedelta(seconds=7), anchor=utc(2024, 3, 30, 0, 0, 3)),
    "interval-0.25s": IntervalRule(timedelta(milliseconds=250), anchor=utc(2024, 3, 31)),
    "cron-15min-berlin-spring": CrontabRule(
        tuple(range(0, 60, 15)),
        tuple(range(24)),
        frozenset(range(7)),
        frozenset(range(1, 32)),
        frozenset(range(1, 13)),
        BERLIN,
    ),
    "cron-2:30-berlin-autumn": CrontabRule(
        (30,),
        (2,),
        frozenset(range(7)),
        frozenset(range(1, 32)),
        frozenset(range(1, 13)),
        BERLIN,
    ),
    # Fails under `all` until the solar rounding bug above is fixed: walking back from the
    # newest sunset finds 2024-06-03 19:22:07 where walking forward finds 19:22:06.
    "sunset-berlin": SolarRule("sunset", *BERLIN_PLACE),
    "clocked": ClockedRule(utc(2024, 3, 31, 1, 0)),
}
ACCOUNTING_CASES = {
    # name: (after, now)
    "interval-7s": (utc(2024, 3, 31, 0, 0, 0), utc(2024, 3, 31, 0, 20, 30)),
    "interval-0.25s": (utc(2024, 3, 31, 0, 0, 0, 100), utc(2024, 3, 31, 0, 3, 0)),
    "cron-15min-berlin-spring": (utc(2024, 3, 30, 20), utc(2024, 3, 31, 3, 7)),
    "cron-2:30-berlin-autumn": (utc(2024, 10, 20), utc(2024, 10, 29, 1, 31)),
    "sunset-berlin": (utc(2024, 6, 1), utc(2024, 6, 20, 19, 0)),
    "clocked": (utc(2024, 3, 30), utc(2024, 3, 31, 1, 0, 30)),
}
ACCOUNTING_POLICIES = {
    "latest": Policy(Misfire.LATEST),
    "skip": Policy(Misfire.SKIP),
    "all": Policy(Misfire.ALL),
    "all-limit-4": Policy(Misfire.ALL, catchup_limit=4),
    "latest-grace": Policy(Misfire.LATEST, grace=timedelta(minutes=40)),
    "all-grace-limit": Policy(Misfire.ALL, grace=timedelta(minutes=40), catchup_limit=3),
}


@pytest.mark.parametrize("policy_name", ACCOUNTING_POLICIES)
@pytest.mark.parametrize("rule_name", ACCOUNTING_RULES)
def test_due_accounts_for_every_window_exactly_once(rule_name: str, policy_name: str) -> None:
    """Every window in (after, now] is dispatched or inside a skipped span, and only once."""
    rule, (after, now) = ACCOUNTING_RULES[rule_name], ACCOUNTING_CASES[rule_name]
    policy = ACCOUNTING_POLICIES[policy_name]
    got = windows.due(rule, after=after, now=now, policy=policy)
    expected = every_window(rule, after, now)
    assert expected, "the case must cover at least one window"
    covered = list(got.dispatch)
    for skipped in got.skipped:
        inside = every_window(rule, skipped.first - US, skipped.last)
        assert inside[0] == skipped.first
        assert inside[-1] == skipped.last
        assert skipped.count == len(inside)
        covered.extend(inside)
    assert sorted(covered) == expected
    assert len(set(covered)) == len(covered)
    assert list(got.dispatch) == sorted(got.dispatch)
    assert got.last_window == expected[-1]
    assert got.next_window == windows.next_window(rule, now)
    # Skipped spans come oldest first and all lie before the first dispatched window.
    bounds = [(s.first, s.last) for s in got.skipped]
    assert bounds == sorted(bounds)
    if got.dispatch and got.skipped:
        assert got.skipped[-1].last < got.dispatch[0]
    if policy.misfire is not Misfire.ALL:
        assert len(got.dispatch) <= 1
    else:
        assert len(got.dispatch) <= policy.catchup_limit
