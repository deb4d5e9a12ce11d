"""Properties of the window math that must hold for any schedule, zone, start time and tick order.

Replicas are simulated in-process: `windows` is pure, so a replica is its own compiled entry
plus the instants at which it happens to tick. Nothing reads a clock or sleeps.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

from celery.schedules import crontab
from hypothesis import given, settings
from hypothesis import strategies as st

from safebeat import windows
from safebeat.config import Config
from safebeat.entries import compile_entry
from safebeat.windows import CrontabRule, IntervalRule, Misfire, Policy, Rule, SolarRule
from tests.unit.test_dst import slot_instant

UTC = timezone.utc
US = timedelta(microseconds=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ZONES = (
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",  # 30-minute DST
    "America/Sao_Paulo",  # DST at midnight until 2019
    "Pacific/Apia",  # skipped 2011-12-30 entirely
    "Europe/Moscow",  # moved its standard offset twice
    "Asia/Kolkata",  # a half-hour offset, no DST
    "UTC",
)
FIRST_INSTANT = datetime(2000, 1, 1, tzinfo=UTC)
LAST_INSTANT = datetime(2035, 12, 31, tzinfo=UTC)
PROPERTY = settings(max_examples=200, deadline=None)


@functools.cache
def transitions(zone: str) -> tuple[datetime, ...]:
    """The instants in 2000-2035 at which `zone` changes its UTC offset (to the second)."""
    tz = ZoneInfo(zone)
    found = []
    day = FIRST_INSTANT
    while day < LAST_INSTANT:
        following = day + timedelta(days=1)
        before = day.astimezone(tz).utcoffset()
        if following.astimezone(tz).utcoffset() != before:
            lo, hi = 0, 86_400
            while lo < hi:
                mid = (lo + hi) // 2
                if (day + timedelta(seconds=mid)).astimezone(tz).utcoffset() == before:
                    lo = mid + 1
                else:
                    hi = mid
            found.append(day + timedelta(seconds=lo))
        day = following
    return tuple(found)


UNIFORM_INSTANTS = st.datetimes(
    min_value=FIRST_INSTANT.replace(tzinfo=None),
    max_value=LAST_INSTANT.replace(tzinfo=None),
).map(lambda naive: naive.replace(tzinfo=UTC))


def instants(zone: str) -> st.SearchStrategy[datetime]:
    """Instants between 2000 and 2035, half of them within three hours of a clock change."""
    near_change = st.builds(
        lambda moment, offset: moment + timedelta(microseconds=offset),
        st.sampled_from(transitions(zone) or (FIRST_INSTANT,)),
        st.one_of(
            st.integers(-3 * 3600 * 10**6, 3 * 3600 * 10**6),
            st.integers(0, 3600 * 10**6),  # inside a repeated hour, or just after a gap
        ),
    )
    return st.one_of(UNIFORM_INSTANTS, near_change)


def compiled(schedule_value: object, zone: str, *, relative: bool = False) -> Rule:
    """One replica's compilation of the shared `beat_schedule` item."""
    raw = {"task": "proj.tasks.job", "schedule": schedule_value, "relative": relative}
    return compile_entry("job", raw, app_timezone=ZoneInfo(zone), config=Config()).rule


def cron_values(low: int, high: int, *, likely: tuple[int, ...] = ()) -> st.SearchStrategy:
    every_value = st.just(f"{low}-{high}")
    some = st.lists(
        st.one_of(st.integers(low, high), st.sampled_from(likely or (low,))),
        min_size=1,
        max_size=4,
        unique=True,
    )
    return st.one_of(every_value, some)


@st.composite
def crontabs(draw: st.DrawFn, *, sparse_days: bool = True) -> crontab:
    """Celery crontabs, biased towards the night hours where clocks change."""
    minute = draw(st.one_of(cron_values(0, 59, likely=(0, 15, 30, 45)), st.just("*/5")))
    hour = draw(cron_values(0, 23, likely=(0, 1, 2, 3, 23)))
    if not sparse_days:
        return crontab(minute=minute, hour=hour)
    # Days of the month stay below 29 so that every rule matches again within a few years.
    return crontab(
        minute=minute,
        hour=hour,
        day_of_week=draw(cron_values(0, 6)),
        day_of_month=draw(cron_values(1, 28, likely=(1, 28))),
        month_of_year=draw(cron_values(1, 12, likely=(3, 10, 11, 12))),
    )


# --- (3) crontab windows bracket every instant, in every zone ---------------------------------


def is_slot_instant(rule: CrontabRule, window: datetime) -> bool:
    """True if `window` shows a matching slot for the first time, or ends a gap that hid one."""
    tz = rule.tz
    local = window.astimezone(tz)

    def matches(wall: datetime) -> bool:
        return (
            wall.second == 0
            and wall.microsecond == 0
            and wall.minute in rule.minutes
            and wall.hour in rule.hours
            and rule.matches_day(wall.date())
        )

    if matches(local.replace(tzinfo=None)):
        return local.fold == 0
    before = (window - US).astimezone(tz).replace(tzinfo=None)
    after = local.replace(tzinfo=None)
    if after - before <= timedelta(seconds=1):
        return False  # the wall clock did not jump here, so no slot was hidden
    wall = before.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while wall < after:
        if matches(wall):
            return True
        wall += timedelta(minutes=1)
    return False


@st.composite
def crontab_cases(draw: st.DrawFn) -> tuple[CrontabRule, datetime, timedelta]:
    zone = draw(st.sampled_from(ZONES))
    rule = compiled(draw(crontabs()), zone)
    assert isinstance(rule, CrontabRule)
    return rule, draw(instants(zone)), draw(st.timedeltas(timedelta(0), timedelta(days=3)))


@PROPERTY
@given(case=crontab_cases())
def test_crontab_latest_and_next_bracket_every_instant(
    case: tuple[CrontabRule, datetime, timedelta],
) -> None:
    """latest(t) <= t < next(latest(t)), windows strictly increase, and none lies in between."""
    rule, t, step = case
    latest = windows.latest_window(rule, t)
    assert latest is not None
    assert latest <= t
    following = windows.next_window(rule, latest)
    assert following is not None
    assert t < following
    # No window strictly between latest(t) and t, nor between t and the next one.
    assert windows.next_window(rule, t) == following
    assert windows.latest_window(rule, following - US) == latest
    # Each is a window of its own, and the sequence keeps strictly increasing both ways.
    assert windows.latest_window(rule, latest) == latest
    assert windows.latest_window(rule, following) == following
    after_following = windows.next_window(rule, following)
    assert after_following is not None
    assert after_following > following
    previous = windows.latest_window(rule, latest - US)
    assert previous is not None
    assert previous < latest
    assert windows.next_window(rule, previous) == latest
    for window in (previous, latest, following, after_following):
        assert is_slot_instant(rule, window), window.astimezone(rule.tz)
    # next_window never moves backwards as time moves forwards.
    later = windows.next_window(rule, t + step)
    assert later is not None
    assert later >= following


# --- (1) replicas ticking in any order agree on every window ------------------------------------


@dataclass(frozen=True)
class Scenario:
    schedule: object
    zone: str
    relative: bool
    registered: datetime
    horizon: timedelta


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """An entry, the instant it was first registered, and how long the replicas run."""
    zone = draw(st.sampled_from(ZONES))
    registered = draw(instants(zone))
    kind = draw(st.sampled_from(["interval", "relative", "crontab"]))
    if kind == "crontab":
        cron = draw(crontabs(sparse_days=False))
        horizon = draw(st.timedeltas(timedelta(minutes=1), timedelta(hours=30)))
        return Scenario(cron, zone, relative=False, registered=registered, horizon=horizon)
    every = timedelta(milliseconds=draw(st.integers(250, 6 * 3600 * 1000)))
    horizon = every * draw(st.integers(1, 40)) + every / 3
    return Scenario(every, zone, kind == "relative", registered, horizon)


def grid(rule: Rule, anchor: datetime, after: datetime, until: datetime) -> list[datetime]:
    """The windows in (after, until]: the interval grid by integer steps, else the rule's own."""
    if not isinstance(rule, IntervalRule):
        return list(windows.windows_between(rule, after, until, anchor))
    origin = rule.anchor or anchor
    step = rule.every // US
    k = (after - origin) // US // step + 1
    found = []
    while origin + timedelta(microseconds=k * step) <= until:
        found.append(origin + timedelta(microseconds=k * step))
        k += 1
    return found


@dataclass
class SharedState:
    """The store's state of one entry, as every replica sees it under the tick lock."""

    anchor: datetime
    defined_at: datetime
    last_window: datetime | None = None

    @property
    def decided_until(self) -> datetime:
        if self.last_window is None or self.last_window < self.defined_at:
            return self.defined_at
        return self.last_window

    def advance(self, window: datetime | None) -> None:
        if window is not None and (self.last_window is None or window > self.last_window):
            self.last_window = window


def run_replicas(
    scenario: Scenario, ticks: list[tuple[int, datetime]], policy: Policy, replicas: int
) -> tuple[list[datetime], list[datetime], SharedState, Rule]:
    """Let each replica tick at its instants, in the given order, against one shared state."""
    rules = [
        compiled(scenario.schedule, scenario.zone, relative=scenario.relative)
        for _ in range(replicas)
    ]
    state = SharedState(
        anchor=scenario.registered.replace(microsecond=0), defined_at=scenario.registered
    )
    dispatched: list[datetime] = []
    skipped: list[datetime] = []
    for replica, now in ticks:
        rule = rules[replica]
        decision = windows.due(
            rule, after=state.decided_until, now=now, policy=policy, anchor=state.anchor
        )
        assert all(window > state.decided_until for window in decision.dispatch)
        dispatched.extend(decision.dispatch)
        for span in decision.skipped:
            inside = list(windows.windows_between(rule, span.first - US, span.last, state.anchor))
            assert span.count is None or span.count == len(inside)
            skipped.extend(inside)
        state.advance(decision.last_window)
    return dispatched, skipped, state, rules[0]


POLICIES = st.sampled_from(
    [
        Policy(Misfire.LATEST),
        Policy(Misfire.SKIP),
        Policy(Misfire.SKIP, grace=timedelta(minutes=5)),
        Policy(Misfire.ALL, catchup_limit=3),
        Policy(Misfire.ALL, grace=timedelta(seconds=90)),
        Policy(Misfire.LATEST, grace=timedelta(seconds=30)),
    ]
)


@st.composite
def tick_plans(draw: st.DrawFn) -> tuple[Scenario, int, list[tuple[int, datetime]]]:
    scenario = draw(scenarios())
    replicas = draw(st.integers(2, 5))
    horizon_us = scenario.horizon // US
    ticks = draw(
        st.lists(
            st.tuples(st.integers(0, replicas - 1), st.integers(0, horizon_us)),
            min_size=1,
            max_size=30,
        )
    )
    at = [(r, scenario.registered + timedelta(microseconds=o)) for r, o in ticks]
    return scenario, replicas, at


@PROPERTY
@given(plan=tick_plans(), policy=POLICIES)
def test_replicas_ticking_in_any_order_decide_each_window_once(
    plan: tuple[Scenario, int, list[tuple[int, datetime]]], policy: Policy
) -> None:
    """Any interleaving of replicas' ticks dispatches no window twice and decides each one once."""
    scenario, replicas, ticks = plan
    dispatched, skipped, state, rule = run_replicas(scenario, ticks, policy, replicas)
    assert not [w for w, n in Counter(dispatched).items() if n > 1], "dispatched twice"
    assert not [w for w, n in Counter(skipped).items() if n > 1], "skipped twice"
    assert not set(dispatched) & set(skipped), "both dispatched and skipped"
    assert dispatched == sorted(dispatched), "dispatched out of order"
    newest_now = max(now for _, now in ticks)
    expected = grid(rule, state.anchor, scenario.registered, newest_now)
    assert sorted([*dispatched, *skipped]) == expected


@st.composite
def covering_tick_plans(draw: st.DrawFn) -> tuple[Scenario, int, list[tuple[int, datetime]]]:
    """Ticks in a random order such that every window has some tick at or after it, soon."""
    scenario = draw(scenarios())
    replicas = draw(st.integers(2, 5))
    rule = compiled(scenario.schedule, scenario.zone, relative=scenario.relative)
    anchor = scenario.registered.replace(microsecond=0)
    end = scenario.registered + scenario.horizon
    ticks: list[tuple[int, datetime]] = []
    for window in grid(rule, anchor, scenario.registered, end):
        delay = draw(st.integers(0, 10**6 // 4)) * US
        ticks.append((draw(st.integers(0, replicas - 1)), window + delay))
    extra = draw(st.lists(st.integers(0, scenario.horizon // US), max_size=10))
    ticks += [(draw(st.integers(0, replicas - 1)), scenario.registered + o * US) for o in extra]
    if not ticks:
        ticks = [(0, end)]
    return scenario, replicas, draw(st.permutations(ticks))


@PROPERTY
@given(plan=covering_tick_plans())
def test_replicas_under_policy_all_dispatch_every_window(
    plan: tuple[Scenario, int, list[tuple[int, datetime]]],
) -> None:
    """With `all` and a large catch-up limit, the replicas together dispatch every window once."""
    scenario, replicas, ticks = plan
    policy = Policy(Misfire.ALL, catchup_limit=10_000)
    dispatched, skipped, state, rule = run_replicas(scenario, ticks, policy, replicas)
    newest_now = max(now for _, now in ticks)
    assert skipped == []
    assert dispatched == grid(rule, state.anchor, scenario.registered, newest_now)


# BUG (safebeat/windows/solar.py, solar rules): the same solar event gets a different window
# depending on when it is asked about. ephem's search result moves by up to ~0.1 s with the
# search's start instant, and rounding to the second splits events near a half second into
# two windows (e.g. Berlin's sunset of 2024-06-04: 19:23:07 or 19:23:08), which lets two
# ticks dispatch one sunset twice. This property fails until the event is re-solved from a
# start instant that depends only on the event's day before rounding.
SOLAR_EVENTS = ("sunrise", "sunset", "solar_noon", "dawn_civil", "dusk_nautical")


@settings(max_examples=60, deadline=None)
@given(
    event=st.sampled_from(SOLAR_EVENTS),
    lat=st.integers(-6000, 6000),
    lon=st.integers(-18000, 18000),
    day=st.dates(date(2000, 1, 1), date(2035, 12, 31)),
    asked=st.lists(st.integers(0, 20 * 3600 * 10**6), min_size=2, max_size=6),
)
def test_replicas_agree_on_solar_windows(
    event: str, lat: int, lon: int, day: date, asked: list[int]
) -> None:
    """Replicas asking at different instants after a solar event all name the same window."""
    rule = SolarRule(event, lat / 100, lon / 100)
    window = windows.next_window(rule, datetime.combine(day, time(), tzinfo=UTC))
    assert window is not None
    following = windows.next_window(rule, window)
    assert following is not None
    seen = {
        windows.latest_window(rule, now)
        for now in (window + offset * US for offset in asked)
        if now < following
    }
    seen.add(windows.next_window(rule, window - timedelta(hours=1)))
    assert seen == {window}


# --- (2) restarts never move an interval's windows ----------------------------------------------


@st.composite
def restart_histories(draw: st.DrawFn) -> tuple[timedelta, bool, datetime, list[datetime]]:
    """An interval entry, its first registration, and the instants its process restarts."""
    every = timedelta(milliseconds=draw(st.integers(1, 24 * 3600 * 1000)))
    relative = draw(st.booleans())
    registered = draw(UNIFORM_INSTANTS)
    gaps = draw(st.lists(st.integers(0, 5 * every // US), min_size=1, max_size=8))
    restarts = [registered]
    for gap in gaps:
        restarts.append(restarts[-1] + gap * US)
    return every, relative, registered, restarts


@PROPERTY
@given(history=restart_histories())
def test_restarts_never_move_interval_windows(
    history: tuple[timedelta, bool, datetime, list[datetime]],
) -> None:
    """Every process lifetime, however it was started, computes windows on the one anchor grid."""
    every, relative, registered, restarts = history
    persisted_anchor = registered.replace(microsecond=0)  # written once, at first registration
    origin = EPOCH if relative else persisted_anchor
    end = restarts[-1] + 3 * every
    seen: list[datetime] = []
    for started, stopped in zip(restarts, [*restarts[1:], end], strict=True):
        rule = compiled(every, "UTC", relative=relative)  # a fresh process compiles again
        latest = windows.latest_window(rule, started, persisted_anchor)
        assert latest is not None
        assert (latest - origin) % every == timedelta(0)
        assert latest <= started < latest + every
        window = windows.next_window(rule, started, persisted_anchor)
        while window is not None and window <= stopped:
            seen.append(window)
            window = windows.next_window(rule, window, persisted_anchor)
    expected: list[datetime] = []
    k = (registered - origin) // every + 1
    while origin + k * every <= end:
        expected.append(origin + k * every)
        k += 1
    assert seen == expected


# --- (5) skipped windows are counted exactly, without walking them -----------------------------


def oracle_count(rule: CrontabRule, first: datetime, last: datetime) -> int:
    """Count the distinct slot instants in [first, last], slot by slot over the local days."""
    day = (first.astimezone(rule.tz) - timedelta(days=1)).date()
    end_day = (last.astimezone(rule.tz) + timedelta(days=1)).date()
    found = set()
    while day <= end_day:
        if rule.matches_day(day):
            for hour in rule.hours:
                for minute in rule.minutes:
                    instant = slot_instant(datetime.combine(day, time(hour, minute)), rule.tz)
                    if first <= instant <= last:
                        found.add(instant)
        day += timedelta(days=1)
    return len(found)


@st.composite
def counting_cases(draw: st.DrawFn) -> tuple[CrontabRule, datetime, datetime]:
    zone = draw(st.sampled_from(ZONES))
    rule = compiled(draw(st.one_of(crontabs(), crontabs(sparse_days=False))), zone)
    assert isinstance(rule, CrontabRule)
    first = draw(instants(zone))
    return rule, first, first + draw(st.timedeltas(timedelta(0), timedelta(days=3)))


@settings(max_examples=150, deadline=None)
@given(case=counting_cases())
def test_crontab_window_count_matches_the_slot_by_slot_oracle(
    case: tuple[CrontabRule, datetime, datetime],
) -> None:
    """count_windows equals the distinct slot instants in the span, clock changes included."""
    rule, first, last = case
    assert windows.count_windows(rule, first, last) == oracle_count(rule, first, last)


@st.composite
def long_counting_cases(draw: st.DrawFn) -> tuple[CrontabRule, datetime, datetime]:
    """A few slots a day over up to a year: many clock changes, few enough windows to walk."""
    zone = draw(st.sampled_from(ZONES))
    schedule = crontab(
        minute=draw(st.lists(st.integers(0, 59), min_size=1, max_size=3, unique=True)),
        hour=draw(
            st.lists(st.sampled_from([0, 1, 2, 3, 12, 23]), min_size=1, max_size=3, unique=True)
        ),
    )
    rule = compiled(schedule, zone)
    assert isinstance(rule, CrontabRule)
    first = draw(instants(zone))
    return rule, first, first + draw(st.timedeltas(timedelta(days=3), timedelta(days=366)))


@settings(max_examples=60, deadline=None)
@given(case=long_counting_cases())
def test_crontab_window_count_over_months_matches_walking_every_window(
    case: tuple[CrontabRule, datetime, datetime],
) -> None:
    """Over spans of days to a year, count_windows equals walking the windows one by one."""
    rule, first, last = case
    walked = sum(1 for _ in windows.windows_between(rule, first - US, last))
    assert windows.count_windows(rule, first, last) == walked
