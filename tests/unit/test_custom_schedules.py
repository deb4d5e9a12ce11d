"""Subclasses of Celery's `crontab` and `schedule` that decide for themselves (`is_due`): their
windows are their own answers, the same on every replica; one that safebeat could not honour
faithfully is refused by name, and the other entries run."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, cast

import pytest
from celery import Celery
from celery.schedules import crontab, schedstate, schedule, solar
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import safebeat.schedules
from safebeat import windows
from safebeat.config import Config, config_from_app
from safebeat.entries import compile_entry
from safebeat.entries.compiling import compile_schedule
from safebeat.errors import EntryError
from safebeat.identity import format_window, task_id_for
from safebeat.stores.memory import MemoryStore
from safebeat.testing import FakeClock, memory_scheduler
from safebeat.windows import Misfire, Policy
from tests.docpages import Page

UTC = timezone.utc
SATURDAY = datetime(2026, 3, 7, 6, 0, 0, 250000, tzinfo=UTC)
MONDAY = datetime(2026, 3, 9, tzinfo=UTC)


class workdays(crontab):
    """Celery's crontab, not due on Saturdays and Sundays."""

    def is_due(self, last_run_at: datetime) -> Any:
        due, next_check = super().is_due(last_run_at)
        if self.now().weekday() >= 5:
            return schedstate(False, next_check)
        return schedstate(due, next_check)


class even_minutes(schedule):
    """An interval that is not due in odd minutes."""

    def is_due(self, last_run_at: datetime) -> Any:
        due, next_check = super().is_due(last_run_at)
        return schedstate(due and self.now().minute % 2 == 0, next_check)


class every_other_run(crontab):
    """Due only two minutes after the last run: its answer depends on `last_run_at`."""

    def is_due(self, last_run_at: datetime) -> Any:
        due, next_check = super().is_due(last_run_at)
        return schedstate(due and self.now() - last_run_at >= timedelta(minutes=2), next_check)


class coin(crontab):
    """Answers differently each time it is asked."""

    flips = 0

    def is_due(self, last_run_at: datetime) -> Any:
        type(self).flips += 1
        return schedstate(self.flips % 2 == 0, 60.0)


class own_clock(crontab):
    def now(self) -> datetime:
        return datetime.now(UTC)

    def is_due(self, last_run_at: datetime) -> Any:
        return super().is_due(last_run_at)


class sunny(solar):
    def is_due(self, last_run_at: datetime) -> Any:
        return super().is_due(last_run_at)


class broken(crontab):
    def is_due(self, last_run_at: datetime) -> Any:
        raise RuntimeError("holiday calendar unreachable")


def make_app(queue: str, schedule_: dict[str, Any]) -> Celery:
    app = Celery("custom", broker="memory://", set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        beat_schedule=schedule_,
        safebeat_url="memory://unit-tests-unused",
        result_expires=None,
    )
    return app


def sent_windows(app: Celery, queue: str) -> Counter[tuple[str, str, str]]:
    """(entry, window, task id) of every message on `queue` (consumed)."""
    sent: Counter[tuple[str, str, str]] = Counter()
    with app.connection_for_read() as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            headers = message.headers
            sent[headers["safebeat_entry"], headers["safebeat_window"], headers["id"]] += 1
    return sent


def run_replicas(replicas: list[Any], clock: FakeClock, until: datetime) -> None:
    """Tick `replicas` until `until`, each at its own phase of every minute."""
    while clock.now() < until:
        for replica in replicas:
            replica.tick()
            clock.advance(7.3)  # replicas tick at different instants, none on the minute
        clock.advance(60 - 7.3 * len(replicas))


def test_workdays_crontab_sends_nothing_on_the_weekend_and_its_windows_on_monday() -> None:
    """Stock beat asks `is_due`; so does safebeat: a weekend passes with no window sent, and
    Monday's windows are sent once each, with the task ids every replica derives."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    app = make_app(
        queue,
        {
            "report": {"task": "t.report", "schedule": workdays(minute=0, hour="9,11")},
            "even": {"task": "t.even", "schedule": even_minutes(timedelta(minutes=1))},
        },
    )
    clock = FakeClock(SATURDAY)
    store = MemoryStore(clock=clock.now)
    replicas = [memory_scheduler(app, clock, store) for _ in range(3)]
    run_replicas(replicas, clock, until=SATURDAY + timedelta(hours=6))
    saturday = sent_windows(app, queue)
    assert not [key for key in saturday if key[0] == "report"]
    even = sorted(window for entry, window, _ in saturday if entry == "even")
    assert even, "the interval entry sends on Saturdays"
    assert all(int(window[14:16]) % 2 == 0 for window in even)
    assert len(even) == len(set(even))

    clock.set(MONDAY + timedelta(hours=8, minutes=57))  # Sunday passes with no beat running
    run_replicas(replicas, clock, until=MONDAY + timedelta(hours=11, minutes=2))
    sent = sent_windows(app, queue)
    report = sorted((window, task_id) for entry, window, task_id in sent if entry == "report")
    expected = [MONDAY + timedelta(hours=9), MONDAY + timedelta(hours=11)]
    assert report == [
        (format_window(window), task_id_for(config_from_app(app).namespace, "report", window))
        for window in expected
    ]
    assert max(sent.values()) == 1


def test_a_schedule_subclass_skips_odd_minutes_in_the_window_math() -> None:
    entry = compile_entry(
        "even",
        {"task": "t", "schedule": even_minutes(10)},
        app_timezone=UTC,
        config=Config(),
    )
    start = datetime(2026, 3, 9, 9, 0, 50, tzinfo=UTC)
    got = list(windows.windows_between(entry.rule, start, start + timedelta(minutes=2), start))
    assert [w.strftime("%H:%M:%S") for w in got] == [
        "09:02:00",
        "09:02:10",
        "09:02:20",
        "09:02:30",
        "09:02:40",
        "09:02:50",
    ]
    assert entry.schedule_text == f"every 10s as {__name__}.even_minutes decides"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (every_other_run(), "depends on last_run_at"),
        (coin(), "differently when asked twice"),
        (own_clock(), "overrides now()"),
        (sunny("sunrise", 52.5, 13.4), "subclasses of celery.schedules.crontab or schedule"),
        (broken(), "RuntimeError (holiday calendar unreachable)"),
    ],
)
def test_a_class_safebeat_cannot_honour_is_refused_by_name_and_the_others_run(
    value: object, words: str
) -> None:
    entries, errors = compile_schedule(
        {
            "custom": {"task": "t.custom", "schedule": value},
            "plain": {"task": "t.plain", "schedule": 60.0},
        },
        app_timezone=UTC,
        config=Config(),
    )
    assert list(entries) == ["plain"]
    assert isinstance(errors["custom"], EntryError)
    assert "schedule entry 'custom'" in str(errors["custom"])
    assert words in str(errors["custom"])
    assert type(value).__qualname__ in str(errors["custom"])


def test_stock_classes_and_subclasses_that_decide_nothing_keep_their_exact_rules() -> None:
    class named(crontab):
        label = "nightly"

    entry = compile_entry(
        "n", {"task": "t", "schedule": named(minute=0, hour=3)}, app_timezone=UTC, config=Config()
    )
    assert isinstance(entry.rule, windows.CrontabRule)


def schedule_of(kind: str) -> object:
    """A fresh object of each kind: every replica builds its own beat_schedule."""
    if kind == "workdays":
        return workdays(minute="*/30", hour="8-18")
    return even_minutes(timedelta(minutes=7))


def answers_due(kind: str, window: datetime) -> bool:
    """Whether `window`, a window of the base schedule, is one the class answers due at."""
    if kind == "workdays":
        return window.weekday() < 5
    return window.minute % 2 == 0


@settings(max_examples=25, deadline=None)
@given(
    kind=st.sampled_from(["workdays", "even_minutes"]),
    phases=st.lists(st.integers(0, 59_999_999), min_size=2, max_size=3),
    step=st.integers(61, 7_200),
    start=st.integers(0, 7 * 24 * 60),
)
def test_replicas_with_different_tick_phases_claim_the_same_windows(
    kind: str, phases: list[int], step: int, start: int
) -> None:
    """Each replica compiles the schedule itself and ticks alone at its own phase and pace;
    under `all`, every one decides exactly the windows the class answers due at."""
    begin = datetime(2026, 3, 2, tzinfo=UTC) + timedelta(minutes=start)
    end = begin + timedelta(days=2)
    anchor = begin  # the interval's grid, as the store keeps it for every replica
    policy = Policy(misfire=Misfire.ALL, catchup_limit=100_000)
    compiled = compile_entry(
        "w", {"task": "t", "schedule": schedule_of(kind)}, app_timezone=UTC, config=Config()
    )
    base = cast(windows.FilteredRule, compiled.rule).base
    expected = [
        window
        for window in windows.windows_between(base, begin, end, anchor)
        if answers_due(kind, window)
    ]
    # From a Friday evening to a Sunday evening no workday window falls due.
    assume(expected)
    decided: list[list[datetime]] = []
    for phase in phases:
        entry = compile_entry(
            "w", {"task": "t", "schedule": schedule_of(kind)}, app_timezone=UTC, config=Config()
        )
        after, now, mine = begin, begin + timedelta(microseconds=phase), []
        while now <= end:
            due = windows.due(entry.rule, after=after, now=now, policy=policy, anchor=anchor)
            mine.extend(due.dispatch)
            after = due.last_window or after
            now += timedelta(seconds=step)
        due = windows.due(entry.rule, after=after, now=end, policy=policy, anchor=anchor)
        decided.append([*mine, *due.dispatch])
    assert all(replica == expected for replica in decided)


def test_the_docs_example_is_honoured() -> None:
    """docs/windows.md's `workdays` runs as shown, and its Saturday has no window."""
    block = Page(Path(__file__).parents[2] / "docs" / "windows.md").block("workdays")
    app = Celery("docs", set_as_current=False)
    exec(block.text, {"app": app})  # noqa: S102 - the page's own example
    entries, errors = compile_schedule(app.conf.beat_schedule, app_timezone=UTC, config=Config())
    assert not errors
    rule = entries["report"].rule
    friday_evening = datetime(2026, 3, 6, 17, tzinfo=UTC)
    assert windows.next_window(rule, friday_evening) == MONDAY + timedelta(hours=9)
    assert "workdays decides" in entries["report"].schedule_text


def test_a_custom_class_is_not_stored_as_its_base_at_run_time() -> None:
    """A stored entry keeps a crontab's fields: the class's rule would be lost, so it is
    refused by name rather than stored as a plain crontab."""
    app = Celery("custom", set_as_current=False)
    app.conf.safebeat_url = "memory://custom"
    with pytest.raises(EntryError) as raised:
        safebeat.schedules.add(app, "report", "t.report", workdays(minute=0), store=MemoryStore())
    assert raised.value.entry == "report"
    assert "workdays decides its own windows" in str(raised.value)


class zoned_workdays(crontab):
    """Not due on weekends in the schedule's own zone (`self.tz`, Celery's app zone)."""

    def is_due(self, last_run_at: datetime) -> Any:
        due, next_check = super().is_due(last_run_at)
        return schedstate(due and self.now().astimezone(self.tz).weekday() < 5, next_check)


@pytest.mark.parametrize("cls", [workdays, zoned_workdays])
def test_the_class_is_asked_in_the_entrys_time_zone(cls: type[crontab]) -> None:
    """Monday 00:30 in Auckland is Sunday in UTC: the class sees the entry's Monday, by
    `now()` and by its `tz`."""
    entry = compile_entry(
        "nz",
        {
            "task": "t",
            "schedule": cls(minute=30, hour=0),
            "options": {"safebeat": {"timezone": "Pacific/Auckland"}},
        },
        app_timezone=UTC,
        config=Config(),
    )
    friday_noon_utc = datetime(2026, 3, 6, 12, tzinfo=UTC)  # Saturday 01:00 in Auckland
    first = windows.next_window(entry.rule, friday_noon_utc)
    assert first == datetime(2026, 3, 8, 11, 30, tzinfo=UTC)  # Monday 00:30 NZDT
    assert windows.next_window(entry.rule, first) == datetime(2026, 3, 9, 11, 30, tzinfo=UTC)
