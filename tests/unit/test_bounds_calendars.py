"""Entry bounds (`start`/`end`) and exclusion calendars (`exclude`), in the entry's zone.

Bounds remove windows: none before `start`, none after `end` (the entry then has no next
window). A calendar keeps the windows but records those that fall on an excluded local
day as skipped with reason `calendar`, inside `windows.due`, so every window is still
decided exactly once.
"""

from __future__ import annotations

import dataclasses
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery.schedules import crontab
from hypothesis import given, settings
from hypothesis import strategies as st

from safebeat import windows
from safebeat.calendars import _unfolded, parse_exclude, read_ics
from safebeat.config import Config
from safebeat.crontab import crontab as seconds_crontab
from safebeat.entries import Entry, compile_entry
from safebeat.errors import ConfigError, EntryError
from safebeat.windows import BoundedRule, Misfire, Policy, SkipReason
from tests.unit.test_windows_properties import ZONES, instants

UTC = timezone.utc
US = timedelta(microseconds=1)
BERLIN = ZoneInfo("Europe/Berlin")


def entry(schedule: object, zone: str = "Europe/Berlin", **safebeat: object) -> Entry:
    raw = {"task": "proj.tasks.job", "schedule": schedule, "options": {"safebeat": safebeat}}
    return compile_entry("job", raw, app_timezone=ZoneInfo(zone), config=Config(namespace="ns"))


def local(day: date, hour: int, minute: int = 0, tz: ZoneInfo = BERLIN) -> datetime:
    return datetime.combine(day, time(hour, minute), tzinfo=tz).astimezone(UTC)


# --- bounds ---------------------------------------------------------------------------------


def test_no_window_before_start_or_after_end() -> None:
    """A daily 09:00 bounded to 1-3 March has exactly those three windows; then none."""
    job = entry(
        crontab(minute=0, hour=9),
        start="2026-03-01T00:00:00+01:00",
        end="2026-03-03T23:59:59+01:00",
    )
    found = list(
        windows.windows_between(
            job.rule, datetime(2026, 2, 1, tzinfo=UTC), local(date(2026, 4, 1), 0)
        )
    )
    assert found == [local(date(2026, 3, d), 9) for d in (1, 2, 3)]
    assert windows.next_window(job.rule, found[-1]) is None
    assert windows.latest_window(job.rule, found[0] - US) is None


def test_after_end_the_entry_has_no_more_windows_to_decide() -> None:
    """Past `end`, `due` dispatches the last window once and then answers no next window."""
    job = entry(crontab(minute=0, hour=9), end="2026-03-02T12:00:00+01:00")
    last = local(date(2026, 3, 2), 9)
    first = windows.due(job.rule, after=last - US, now=last, policy=job.policy)
    assert first.dispatch == (last,)
    assert first.next_window is None
    later = windows.due(job.rule, after=last, now=last + timedelta(days=30), policy=job.policy)
    assert later == windows.Due((), (), None)


def test_an_interval_with_a_start_counts_its_windows_from_it() -> None:
    """`every 1h` with start 09:30 fires at 09:30, 10:30, ...: the start is the anchor."""
    job = entry(3600, start="2026-03-01T09:30:00+01:00")
    assert isinstance(job.rule, BoundedRule)
    start = local(date(2026, 3, 1), 9, 30)
    assert windows.next_window(job.rule, datetime(2026, 1, 1, tzinfo=UTC)) == start
    assert windows.next_window(job.rule, start) == start + timedelta(hours=1)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"start": "2026-03-01T09:00"}, "UTC offset"),
        ({"end": 5}, "UTC offset"),
        ({"start": "yesterday"}, "ISO 8601"),
        ({"start": "2026-03-02T00:00Z", "end": "2026-03-01T00:00Z"}, "before start"),
    ],
)
def test_bad_bounds_name_the_entry_and_the_key(options: dict[str, object], problem: str) -> None:
    """A time without an offset, or an end before the start, is refused naming entry and key."""
    with pytest.raises(EntryError, match=problem) as caught:
        entry(60, **options)
    assert "job" in str(caught.value)


def test_bounds_change_the_described_schedule_and_the_digest() -> None:
    """Adding an end is a changed definition: replicas running the old one are reported."""
    plain = entry(crontab(minute=0, hour=9))
    bounded = entry(crontab(minute=0, hour=9), end="2026-12-31T00:00:00Z")
    assert bounded.schedule_text == f"{plain.schedule_text} not after 2026-12-31T00:00:00Z"
    assert bounded.digest != plain.digest


@st.composite
def bounded_cases(draw: st.DrawFn) -> tuple[windows.Rule, windows.Rule, datetime]:
    zone = draw(st.sampled_from(ZONES))
    start = draw(instants(zone))
    end = start + draw(st.timedeltas(timedelta(0), timedelta(days=20)))
    schedule = draw(st.sampled_from([crontab(minute="*/30", hour="0-3"), crontab(minute=0)]))
    job = entry(schedule, zone, start=start.isoformat(), end=end.isoformat())
    assert isinstance(job.rule, BoundedRule)
    t = start + draw(st.timedeltas(timedelta(days=-3), timedelta(days=23)))
    return job.rule.rule, job.rule, t


@settings(max_examples=150, deadline=None)
@given(case=bounded_cases())
def test_bounded_windows_are_the_inner_windows_within_the_bounds(
    case: tuple[windows.Rule, windows.Rule, datetime],
) -> None:
    """latest/next of a bounded rule are the inner rule's, dropped exactly when out of bounds."""
    inner, bounded, t = case
    assert isinstance(bounded, BoundedRule)
    assert bounded.start is not None
    assert bounded.end is not None
    start, end = bounded.start, bounded.end
    inner_latest = windows.latest_window(inner, min(t, end))
    expected_latest = inner_latest if inner_latest and inner_latest >= start else None
    assert windows.latest_window(bounded, t) == expected_latest
    inner_next = windows.next_window(inner, max(t, start - US))
    expected_next = inner_next if inner_next and inner_next <= end else None
    assert windows.next_window(bounded, t) == expected_next


# --- calendars ------------------------------------------------------------------------------

HOLIDAYS = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//test//holidays//EN
BEGIN:VEVENT
UID:new-year
DTSTART;VALUE=DATE:20200101
DTEND;VALUE=DATE:20200102
RRULE:FREQ=YEARLY
SUMMARY:New Year
END:VEVENT
BEGIN:VEVENT
UID:christmas
DTSTART;VALUE=DATE:20241225
DTEND;VALUE=DATE:20241227
RRULE:FREQ=YEARLY;BYMONTH=12;BYMONTHDAY=25;UNTIL=20261231
SUMMARY:Christmas and
  Boxing Day
END:VEVENT
BEGIN:VEVENT
UID:bridge
DTSTART;VALUE=DATE:20260515
SUMMARY:Bridge day
END:VEVENT
BEGIN:VEVENT
UID:leap
DTSTART;VALUE=DATE:20240229
DURATION:P1D
RRULE:FREQ=YEARLY;INTERVAL=4;COUNT=2
SUMMARY:Leap day
END:VEVENT
BEGIN:VEVENT
UID:gone
DTSTART;VALUE=DATE:20260601
STATUS:CANCELLED
SUMMARY:Cancelled
END:VEVENT
END:VCALENDAR
"""


def test_an_ics_file_excludes_its_all_day_and_yearly_days(tmp_path: Path) -> None:
    """All-day events, yearly ones with UNTIL/COUNT/INTERVAL, folded lines; cancelled ignored."""
    path = tmp_path / "holidays.ics"
    path.write_text(HOLIDAYS)
    calendar = read_ics(path, BERLIN)
    excluded = {
        date(2031, 1, 1),
        date(2024, 12, 25),
        date(2026, 12, 26),
        date(2026, 5, 15),
        date(2024, 2, 29),
        date(2028, 2, 29),
    }
    kept = {
        date(2026, 1, 2),
        date(2027, 12, 25),  # UNTIL ended the yearly Christmas
        date(2026, 12, 27),
        date(2026, 6, 1),
        date(2032, 2, 29),  # COUNT=2: 2024 and 2028 only
        date(2025, 3, 1),
    }
    for day in excluded:
        assert calendar.excludes(local(day, 12)), day
    for day in kept:
        assert not calendar.excludes(local(day, 12)), day


@pytest.mark.parametrize(
    ("event", "problem"),
    [
        ("DTSTART:20261225T090000Z", "only all-day events"),
        ("DTSTART;VALUE=DATE:20261225\nRRULE:FREQ=MONTHLY", "only FREQ=YEARLY"),
        ("DTSTART;VALUE=DATE:20261126\nRRULE:FREQ=YEARLY;BYDAY=4TH", "BYDAY=4TH"),
        ("SUMMARY:x", "no DTSTART"),
        ("DTSTART;VALUE=DATE:20261225\nDURATION:P999999999D", "longer than 36500 days"),
        ("DTSTART;VALUE=DATE:99991230\nDURATION:P5D", "ends after the year 9999"),
    ],
)
def test_an_ics_event_that_cannot_exclude_days_is_refused(
    tmp_path: Path, event: str, problem: str
) -> None:
    """Timed events and rules other than a yearly date are refused, naming file and event."""
    path = tmp_path / "bad.ics"
    path.write_text(f"BEGIN:VCALENDAR\nBEGIN:VEVENT\n{event}\nEND:VEVENT\nEND:VCALENDAR\n")
    with pytest.raises(ConfigError, match=problem) as caught:
        read_ics(path, BERLIN)
    assert "bad.ics: event 1" in str(caught.value)


def test_a_list_excludes_days_ranges_and_yearly_days() -> None:
    """Days, `a/b` ranges (both included), pairs, and `--MM-DD` every year."""
    calendar = parse_exclude(
        ["2026-05-15", "2026-12-24/2026-12-26", (date(2026, 8, 1), "2026-08-02"), "--01-01"],
        BERLIN,
    )
    for day in (date(2026, 5, 15), date(2026, 12, 24), date(2026, 12, 26), date(2026, 8, 2)):
        assert calendar.excludes(local(day, 0)), day
    assert calendar.excludes(local(date(2040, 1, 1), 23, 59))
    for day in (date(2026, 5, 16), date(2026, 12, 27), date(2026, 7, 31), date(2040, 1, 2)):
        assert not calendar.excludes(local(day, 0)), day


def test_days_are_days_of_the_entrys_time_zone() -> None:
    """23:30 UTC on 24 December is 25 December in Berlin: excluded there, not in UTC."""
    window = datetime(2026, 12, 24, 23, 30, tzinfo=UTC)
    assert parse_exclude(["2026-12-25"], BERLIN).excludes(window)
    assert not parse_exclude(["2026-12-25"], UTC).excludes(window)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("2026-12-25", "a list of days"),
        (["2026-13-01"], "is not a day"),
        (["2026-12-26/2026-12-24"], "ends before it starts"),
        (["--02-30"], "not a day of the year"),
        ([datetime(2026, 1, 1, tzinfo=UTC)], "is a time"),
        ("missing.ics", "cannot read the calendar"),
    ],
)
def test_a_bad_exclude_names_the_entry_and_what_is_wrong(value: object, problem: str) -> None:
    """Every malformed `exclude` is an error naming the entry, the key and the part."""
    with pytest.raises(EntryError, match=problem) as caught:
        entry(60, exclude=value)
    assert "job" in str(caught.value)
    assert "['exclude']" in str(caught.value)


def test_a_window_on_an_excluded_day_is_skipped_as_calendar() -> None:
    """Beat ticking through Christmas: 24th sent, 25th skipped (`calendar`), 26th sent."""
    job = entry(crontab(minute=0, hour=9), exclude=["2026-12-25"])
    sent, skipped = [], []
    after = local(date(2026, 12, 24), 0)
    now = after
    while now < local(date(2026, 12, 27), 0):
        now += timedelta(minutes=7)
        decision = windows.due(job.rule, after=after, now=now, policy=job.policy)
        sent += decision.dispatch
        skipped += decision.skipped
        after = decision.last_window or after
    assert sent == [local(date(2026, 12, 24), 9), local(date(2026, 12, 26), 9)]
    assert skipped == [
        windows.SkippedSpan(
            local(date(2026, 12, 25), 9), local(date(2026, 12, 25), 9), 1, SkipReason.CALENDAR
        )
    ]


def test_catching_up_skips_excluded_windows_in_runs() -> None:
    """Under `all`, consecutive excluded windows become one `calendar` span each run."""
    job = entry(crontab(minute=0), exclude=["2026-12-25"])
    policy = dataclasses.replace(job.policy, misfire=Misfire.ALL)
    after = local(date(2026, 12, 24), 21, 30)
    now = local(date(2026, 12, 26), 2, 30)
    decision = windows.due(job.rule, after=after, now=now, policy=policy)
    assert decision.dispatch == (
        local(date(2026, 12, 24), 22),
        local(date(2026, 12, 24), 23),
        local(date(2026, 12, 26), 0),
        local(date(2026, 12, 26), 1),
        local(date(2026, 12, 26), 2),
    )
    assert decision.skipped == (
        windows.SkippedSpan(
            local(date(2026, 12, 25), 0), local(date(2026, 12, 25), 23), 24, SkipReason.CALENDAR
        ),
    )


@st.composite
def calendar_cases(
    draw: st.DrawFn,
) -> tuple[windows.Rule, Policy, datetime, datetime]:
    zone = draw(st.sampled_from(ZONES))
    schedule = draw(
        st.sampled_from(
            [
                crontab(minute="*/30", hour="0-3,23"),
                crontab(minute=0),
                seconds_crontab(second="*/20", minute="*/10", hour="1-2"),
            ]
        )
    )
    days = draw(st.lists(st.dates(date(2000, 1, 1), date(2035, 12, 1)), max_size=5))
    job = entry(schedule, zone, exclude=[d.isoformat() for d in days] + ["--03-31"])
    misfire = draw(st.sampled_from(list(Misfire)))
    policy = dataclasses.replace(job.policy, misfire=misfire)
    after = draw(instants(zone))
    return job.rule, policy, after, after + draw(st.timedeltas(timedelta(0), timedelta(days=3)))


@settings(max_examples=150, deadline=None)
@given(case=calendar_cases())
def test_every_window_is_decided_once_and_none_sent_on_an_excluded_day(
    case: tuple[windows.Rule, Policy, datetime, datetime],
) -> None:
    """With a calendar, dispatched and skipped windows still cover (after, now] exactly once,
    across clock changes, and no dispatched window falls on an excluded day."""
    rule, policy, after, now = case
    assert policy.calendar is not None
    decision = windows.due(rule, after=after, now=now, policy=policy)
    counted = len(decision.dispatch) + sum(span.count or 0 for span in decision.skipped)
    expected = sum(1 for _ in windows.windows_between(rule, after, now))
    assert counted == expected
    assert not any(policy.calendar.excludes(w) for w in decision.dispatch)
    for span in decision.skipped:
        if span.reason is SkipReason.CALENDAR:
            assert all(
                policy.calendar.excludes(w)
                for w in windows.windows_between(rule, span.first - US, span.last)
            )


class CountedText(str):
    """Text that counts the characters its concatenations copy (`copied`)."""

    copied = 0

    def __add__(self, other: str) -> CountedText:
        CountedText.copied += len(self) + len(other)
        return CountedText(str.__add__(self, other))

    def __getitem__(self, key: Any) -> CountedText:
        return CountedText(str.__getitem__(self, key))

    def splitlines(self, keepends: bool = False) -> list[CountedText]:  # type: ignore[override]
        return [CountedText(line) for line in str.splitlines(self, keepends)]


def test_ics_unfolding_copies_each_character_a_bounded_number_of_times() -> None:
    """Unfolding a line of 2,000 folds copies its text a few times at most, not once per
    fold: adding each fold to the line so far made unfolding quadratic (a 3.6 MB line took
    18 s). Counted in characters copied, not timed, so the answer is the same on any
    machine."""
    text = CountedText("DESCRIPTION:a\r\n " + ("y" * 73 + "\r\n ") * 2000 + "z\r\n")
    CountedText.copied = 0
    [line] = _unfolded(text)
    assert len(line) == len("DESCRIPTION:a") + 73 * 2000 + 1
    assert CountedText.copied <= 2 * len(text)


def test_a_calendar_unfolds_a_long_folded_line_whole() -> None:
    """Unfolding still joins every fold of a line, in order (RFC 5545, 3.1)."""
    assert _unfolded("A:1\r\n 2\r\n\t3\r\nB:4\r\n") == ["A:123", "B:4"]


def test_a_large_generated_calendar_is_read_whole(tmp_path: Path) -> None:
    """A 4 MB calendar (3,000 one-day events, each with a description folded over 15
    lines, and one description of 3.6 MB folded 50,000 times) gives every event's day and
    keeps every fold of the long line. Unfolding is linear: this reads in a fraction of a
    second where adding each fold to the line so far took 18 s."""
    first = date(2030, 1, 1)
    days = [first + timedelta(days=n) for n in range(3000)]
    fold = "\r\n " + "y" * 73
    events = [
        f"BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:{day:%Y%m%d}\r\nSUMMARY:day {n}\r\n"
        f"DESCRIPTION:d{fold * 15}\r\nEND:VEVENT\r\n"
        for n, day in enumerate(days)
    ]
    long_event = (
        "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20400101\r\nSUMMARY:long\r\n"
        f"DESCRIPTION:x{fold * 50_000}\r\nEND:VEVENT\r\n"
    )
    text = f"BEGIN:VCALENDAR\r\n{''.join(events)}{long_event}END:VCALENDAR\r\n"
    assert len(text) > 4_000_000
    path = tmp_path / "large.ics"
    path.write_text(text)
    calendar = read_ics(path, BERLIN)
    assert calendar.ranges == tuple((day, day) for day in [*days, date(2040, 1, 1)])
    [long_line] = [line for line in _unfolded(text) if line.startswith("DESCRIPTION:x")]
    assert long_line == "DESCRIPTION:x" + "y" * 73 * 50_000
