"""beat_schedule items are validated one by one and compiled into window rules."""

from __future__ import annotations

import gc
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery.beat import BeatLazyFunc
from celery.schedules import crontab, schedule, solar

from safebeat.config import Config
from safebeat.entries import compile_entry, compile_schedule, describe, zone_of
from safebeat.entries import compiling as entries_module
from safebeat.errors import EntryError
from safebeat.windows import CrontabRule, IntervalRule, Misfire, SolarRule

CONFIG = Config(namespace="proj")
UTC = timezone.utc


def compile_one(raw: Any, config: Config = CONFIG, zone: Any = UTC) -> Any:
    return compile_entry("e", raw, app_timezone=zone, config=config)


def test_numbers_timedeltas_and_schedules_become_intervals() -> None:
    """Seconds, timedeltas and celery.schedules.schedule all compile to an interval rule."""
    for value in (90, 90.0, timedelta(seconds=90), schedule(timedelta(seconds=90))):
        entry = compile_one({"task": "t", "schedule": value})
        assert entry.rule == IntervalRule(timedelta(seconds=90))
        assert entry.schedule_text == "every 90s"


def test_relative_intervals_anchor_at_the_epoch() -> None:
    """`relative=True` aligns windows to the interval (anchored at the Unix epoch)."""
    entry = compile_one({"task": "t", "schedule": 3600, "relative": True})
    assert entry.rule == IntervalRule(timedelta(hours=1), datetime(1970, 1, 1, tzinfo=UTC))
    assert entry.schedule_text == "every 3600s from 1970-01-01T00:00:00Z"


def test_crontab_keeps_celerys_parsed_fields_and_the_app_zone() -> None:
    """A crontab compiles from Celery's parsed sets, in the app's time zone by default."""
    entry = compile_one(
        {"task": "t", "schedule": crontab(minute="*/15", hour="9-17", day_of_week="mon-fri")},
        zone=ZoneInfo("Europe/Moscow"),
    )
    assert isinstance(entry.rule, CrontabRule)
    assert entry.rule.minutes == (0, 15, 30, 45)
    assert entry.rule.hours == tuple(range(9, 18))
    assert entry.rule.days_of_week == frozenset(range(1, 6))
    assert entry.schedule_text == "crontab 0,15,30,45 9-17 * * 1-5 in Europe/Moscow"


@pytest.mark.parametrize(
    "raw",
    [
        {"schedule": crontab(minute=0, hour=9)},  # the app's zone
        {"schedule": crontab(minute=0, hour=9), "options": {"safebeat": {"timezone": "UTC"}}},
        {"schedule": crontab(), "options": {"safebeat": {"timezone": "Asia/Kolkata"}}},
        {"schedule": 5},
        {"schedule": solar("sunset", 55.75, 37.62)},
    ],
)
def test_a_schedule_text_names_the_zone_of_a_crontab_only(raw: Any) -> None:
    """`zone_of` reads back the zone `describe` wrote: a crontab's (the app's or its own),
    and None for intervals and solar events, which have none."""
    entry = compile_one({"task": "t", **raw}, zone=ZoneInfo("Europe/Moscow"))
    found = zone_of(entry.schedule_text)
    if isinstance(entry.rule, CrontabRule):
        summer = datetime(2026, 7, 1, 12)
        assert found is not None
        assert found.utcoffset(summer) == entry.rule.tz.utcoffset(summer)
    else:
        assert found is None


def test_per_entry_policy_and_zone_override_the_defaults() -> None:
    """options['safebeat'] sets misfire, grace, catch-up limit and time zone for one entry."""
    entry = compile_one(
        {
            "task": "t",
            "schedule": crontab(minute=0, hour=3),
            "options": {
                "queue": "reports",
                "safebeat": {
                    "misfire": "all",
                    "grace": 300,
                    "catchup_limit": 7,
                    "timezone": "Europe/Berlin",
                },
            },
        }
    )
    assert entry.policy.misfire is Misfire.ALL
    assert entry.policy.grace == timedelta(minutes=5)
    assert entry.policy.catchup_limit == 7
    assert entry.rule.tz == ZoneInfo("Europe/Berlin")
    assert entry.options == {"queue": "reports"}


def test_settings_supply_the_default_policy() -> None:
    """Entries without their own policy take safebeat_misfire / grace / catchup_limit."""
    config = Config(misfire=Misfire.SKIP, grace=timedelta(seconds=30), catchup_limit=3)
    entry = compile_one({"task": "t", "schedule": 10}, config=config)
    assert (entry.policy.misfire, entry.policy.grace, entry.policy.catchup_limit) == (
        Misfire.SKIP,
        timedelta(seconds=30),
        3,
    )


def test_solar_schedules_compile() -> None:
    """A Celery solar schedule keeps its event and place."""
    entry = compile_one({"task": "t", "schedule": solar("sunset", 55.75, 37.62)})
    assert entry.rule == SolarRule("sunset", 55.75, 37.62)
    assert describe(entry.rule) == "solar sunset at 55.75,37.62"


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (1_000_000, 1_000_001),
        (123_456.789, 123_456.788),
        (86_400 * 400, 86_400 * 400 + 1),
        (0.000_001, 0.000_002),
    ],
)
def test_intervals_that_differ_have_different_text_and_digest(one: float, other: float) -> None:
    """Two intervals that differ, even by a microsecond of a large one, never share a text
    or a digest, so a changed interval is noticed during a rolling deploy."""
    first = compile_one({"task": "t", "schedule": one})
    second = compile_one({"task": "t", "schedule": other})
    assert describe(first.rule) != describe(second.rule)
    assert first.digest != second.digest


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (60, "every 60s"),
        (0.25, "every 0.25s"),
        (1e6, "every 1e+06s"),
        (1_000_001, "every 1000001s"),
    ],
)
def test_interval_text_keeps_the_short_form_where_it_is_exact(seconds: float, text: str) -> None:
    """An interval's text is the short form entries were registered with whenever that form
    is exact (so their stored definitions stay the same), and exact otherwise."""
    assert describe(compile_one({"task": "t", "schedule": seconds}).rule) == text


def test_solar_places_that_differ_have_different_text() -> None:
    """Coordinates are described exactly: two places 10 m apart are two schedules."""
    one = compile_one({"task": "t", "schedule": solar("sunset", 55.755826, 37.6173)})
    other = compile_one({"task": "t", "schedule": solar("sunset", 55.755827, 37.6173)})
    assert describe(one.rule) == "solar sunset at 55.755826,37.6173"
    assert describe(one.rule) != describe(other.rule)


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("not a dict", "expected a dict"),
        ({"schedule": 10}, "'task' must be a task name"),
        ({"task": "t"}, "'schedule' is missing"),
        ({"task": "t", "schedule": 10, "every": 5}, "unknown key(s) ['every']"),
        (
            {"task": "t", "schedule": "daily"},
            "is text, which safebeat reads only for entries added at run time",
        ),
        ({"task": "t", "schedule": 0}, "an interval must be positive"),
        ({"task": "t", "schedule": -5}, "an interval must be positive"),
        ({"task": "t", "schedule": True}, "is not a schedule"),
        ({"task": "t", "schedule": 10, "args": "abc"}, "'args' must be a list or tuple"),
        ({"task": "t", "schedule": 10, "kwargs": [1]}, "'kwargs' must be a dict"),
        ({"task": "t", "schedule": 10, "options": {"task_id": "x"}}, "set by safebeat"),
        ({"task": "t", "schedule": 10, "options": {"safebeat": {"misfire": "x"}}}, "misfire='x'"),
        ({"task": "t", "schedule": 10, "options": {"safebeat": {"jiter": 1}}}, "['jiter']"),
        (
            {"task": "t", "schedule": 10, "options": {"safebeat": {"catchup_limit": 0}}},
            "catchup_limit=0",
        ),
        (
            {"task": "t", "schedule": 10, "options": {"safebeat": {"timezone": "Mars/Base"}}},
            "unknown time zone 'Mars/Base'",
        ),
        (
            {"task": "t", "schedule": 10, "options": {"safebeat": {"overlap": "maybe"}}},
            "overlap='maybe': expected one of 'allow', 'forbid'",
        ),
    ],
)
def test_malformed_entries_name_the_entry_and_the_problem(raw: object, problem: str) -> None:
    """Each kind of bad input is an EntryError naming the entry and what is wrong."""
    with pytest.raises(EntryError) as caught:
        compile_one(raw)
    assert caught.value.entry == "e"
    assert "'e'" in str(caught.value)
    assert problem in str(caught.value)


def test_one_bad_entry_does_not_stop_the_others() -> None:
    """compile_schedule returns the good entries and the errors of the bad ones."""
    entries, errors = compile_schedule(
        {
            "good": {"task": "t", "schedule": 5},
            "bad": {"task": "t", "schedule": "hourly"},
        },
        app_timezone=UTC,
        config=CONFIG,
    )
    assert set(entries) == {"good"}
    assert set(errors) == {"bad"}


def test_digest_is_stable_across_processes_and_tracks_changes() -> None:
    """The digest ignores object identities (lazy args) but changes with args or schedule."""
    base = {"task": "t", "schedule": 10, "kwargs": {"now": BeatLazyFunc(datetime.now)}}
    again = {"task": "t", "schedule": 10, "kwargs": {"now": BeatLazyFunc(datetime.now)}}
    assert compile_one(base).digest == compile_one(again).digest
    assert compile_one(base).digest != compile_one({**base, "args": [1]}).digest
    assert compile_one(base).digest != compile_one({**base, "schedule": 11}).digest


def test_schedule_text_is_canonical() -> None:
    """Equal windows give equal text, whichever way the crontab was written."""
    spelled = compile_one({"task": "t", "schedule": crontab(minute="0,30", hour="*/6")})
    listed = compile_one({"task": "t", "schedule": crontab(minute=[30, 0], hour=[0, 6, 12, 18])})
    assert spelled.schedule_text == listed.schedule_text == "crontab 0,30 0,6,12,18 * * * in UTC"


def test_entries_share_equal_rules_and_policies_and_let_them_go() -> None:
    """100,000 crontab entries held a copy each of the same sets of days and months."""

    def job(minute: str) -> dict[str, object]:
        return {"task": "proj.tasks.job", "schedule": crontab(minute=minute)}

    schedule = {"a": job("13,47"), "b": job("13,47"), "c": job("11,53")}
    entries, _ = compile_schedule(schedule, app_timezone=timezone.utc, config=Config())

    assert entries["a"].rule is entries["b"].rule
    assert entries["a"].policy is entries["b"].policy
    assert entries["a"].rule is not entries["c"].rule
    assert entries["a"].rule != entries["c"].rule
    shared = len(entries_module._SHARED)
    del entries
    gc.collect()
    assert len(entries_module._SHARED) < shared


def test_a_schedule_compiles_each_timing_once_and_every_entry_as_if_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1,000,000 entries on a few schedules: the rule, policy and text of a schedule (one
    object, or one plain value) with the same plain safebeat options (or none) are worked
    out once, and every entry is the one `compile_entry` gives for it alone."""
    rules: list[object] = []
    compile_rule = entries_module.compile_rule

    def counted(*args: Any, **kwargs: Any) -> Any:
        rules.append(args[1])
        return compile_rule(*args, **kwargs)

    monkeypatch.setattr(entries_module, "compile_rule", counted)
    hourly = crontab(minute=0)
    schedule = {
        "a": {"task": "t", "schedule": hourly, "args": (1,)},
        "b": {"task": "t", "schedule": hourly, "args": (2,)},
        "c": {"task": "t", "schedule": timedelta(hours=1)},
        "d": {"task": "t", "schedule": timedelta(hours=1), "relative": True},
        "e": {"task": "t", "schedule": 3600},
        "f": {"task": "t", "schedule": 3600.0},
        "g": {"task": "t", "schedule": 3600.0},
        "h": {"task": "t", "schedule": hourly, "options": {"safebeat": {"jitter": 30}}},
        "i": {"task": "t", "schedule": hourly, "options": {"safebeat": {"timezone": "Asia/Tokyo"}}},
        "j": {"task": "t", "schedule": crontab(minute=0)},  # equal, another object
        "k": {"task": "t", "schedule": hourly, "relative": "yes"},  # an error, not a timing
        # the same plain safebeat options as i: i's timing (django-celery-beat's crontab rows)
        "l": {"task": "u", "schedule": hourly, "options": {"safebeat": {"timezone": "Asia/Tokyo"}}},
        "m": {"task": "t", "schedule": hourly, "options": {"safebeat": {"grace": 1}}},
        "n": {"task": "t", "schedule": hourly, "options": {"safebeat": {"grace": True}}},  # not 1
        # not plain data: compiled alone
        "o": {
            "task": "t",
            "schedule": hourly,
            "options": {"safebeat": {"grace": timedelta(seconds=5)}},
        },
        "p": {
            "task": "t",
            "schedule": hourly,
            "options": {"safebeat": {"grace": timedelta(seconds=5)}},
        },
    }
    entries, errors = compile_schedule(schedule, app_timezone=UTC, config=CONFIG)
    assert set(errors) == {"k", "n"}
    assert len(rules) == 11  # a+b, c, d, e, f+g, h, i+l, j, m, o, p; none for k and n
    for name, entry in entries.items():
        assert entry == compile_entry(name, schedule[name], app_timezone=UTC, config=CONFIG)
    assert entries["h"].policy.jitter is not None
    assert entries["a"].policy.jitter is None


def test_a_schedule_made_as_it_is_read_gets_each_entry_its_own_timing() -> None:
    """A source that builds each item as it is read (a database's rows) may give a new
    schedule object where a dropped one was: each entry still gets its own schedule."""

    class Rows(dict[str, Any]):
        def items(self) -> Any:
            for i in range(120):
                yield f"e{i}", {"task": "t", "schedule": crontab(minute=i % 60)}

    entries, _ = compile_schedule(Rows(), app_timezone=UTC, config=CONFIG)
    assert len(entries) == 120
    for i in range(120):
        assert entries[f"e{i}"].schedule_text == f"crontab {i % 60} * * * * in UTC"


def test_entries_without_kwargs_or_options_share_one_empty_mapping() -> None:
    """No empty dict per entry: they cost about 130 bytes of each of 100,000 entries. The
    digest is computed from the dicts as before, and the mapping compares equal to {}."""
    plain = compile_one({"task": "t", "schedule": 10})
    also = compile_one({"task": "u", "schedule": 20, "options": {"safebeat": {"grace": 5}}})
    assert plain.kwargs is also.kwargs is plain.options is also.options
    assert plain.kwargs == {}
    assert plain.options == {}
    assert plain.digest == compile_one({"task": "t", "schedule": 10, "kwargs": {}}).digest
    with_kwargs = compile_one({"task": "t", "schedule": 10, "kwargs": {"a": 1}})
    assert with_kwargs.kwargs == {"a": 1}
    assert with_kwargs.options == {}


def test_digests_stay_what_they_were_when_entries_share_a_timing() -> None:
    """Entries alike but for their arguments encode the rest of their digest once; every
    digest is still the one earlier versions stored (else a restart re-registers all)."""
    at = datetime(2026, 1, 2, tzinfo=UTC)
    schedule = {
        "plain": {"task": "t", "schedule": 10, "args": (1, "a")},
        "same-timing": {"task": "t", "schedule": 10, "args": [2, None, 1.5, {"b": 1, "a": [True]}]},
        "other-task": {"task": "u", "schedule": 10},
        "unicode": {"task": "t", "schedule": 10, "args": ["é", "\u2028"]},
        "when": {"task": "t", "schedule": 10, "args": [at, timedelta(1)]},
        "int-keys": {"task": "t", "schedule": 10, "args": [{1: "a", "b": 2}]},
        "tuple-in": {"task": "t", "schedule": 10, "args": [(1, 2)]},
        "kwargs": {"task": "t", "schedule": 10, "args": [1], "kwargs": {"x": 1}},
        "options": {"task": "t", "schedule": 10, "args": [1], "options": {"queue": "q"}},
        "crontab": {"task": "t", "schedule": crontab(minute="*/5"), "args": [3]},
        "overlap": {
            "task": "t",
            "schedule": 10,
            "args": [4],
            "options": {"safebeat": {"overlap": "forbid"}},
        },
        "pause": {
            "task": "t",
            "schedule": 10,
            "args": [5],
            "options": {"safebeat": {"pause_after_failures": 3}},
        },
        "jitter": {
            "task": "t",
            "schedule": 10,
            "args": [6],
            "options": {"safebeat": {"jitter": 5}},
        },
        "misfire": {
            "task": "t",
            "schedule": 10,
            "args": [7],
            "options": {"safebeat": {"misfire": "skip"}},
        },
    }
    entries, errors = compile_schedule(schedule, app_timezone=UTC, config=CONFIG)
    assert not errors
    assert {name: entry.digest for name, entry in entries.items()} == {
        "plain": "884b8e1fd39620c1",
        "same-timing": "acb3e57d76ff32f5",
        "other-task": "8e923a49dcc2c7aa",
        "unicode": "5d2b9cdeaaf72b57",
        "when": "0f21469ac8ee1c66",
        "int-keys": "122bee4415dfc037",
        "tuple-in": "5eb1a1dcaf0ba425",
        "kwargs": "40e086d9049e5173",
        "options": "17f1ae604d540145",
        "crontab": "931f866bf412f38a",
        "overlap": "ab32107ced00fd19",
        "pause": "cdb54bfcd457dd9d",
        "jitter": "ffe5cd19583a7bfc",
        "misfire": "0f5553937e0b4ea2",
    }
    for name, raw in schedule.items():  # alone, as a runtime entry compiles
        assert (
            compile_entry(name, raw, app_timezone=UTC, config=CONFIG).digest == entries[name].digest
        )


def test_excluded_days_in_another_time_zone_are_another_definition() -> None:
    """The days an interval skips are days in its time zone, which its schedule's text
    does not tell: two replicas with the zone set otherwise skip other windows, so their
    digests differ (and the rolling deploy is reported). Entries in UTC keep theirs."""
    raw: dict[str, Any] = {"task": "t", "schedule": 3600}
    excluded = {"exclude": ["2026-12-25"]}
    digests = {
        zone: compile_one({**raw, "options": {"safebeat": {**excluded, "timezone": zone}}}).digest
        for zone in ("Pacific/Kiritimati", "Europe/Paris", "UTC")
    }
    assert len(set(digests.values())) == 3
    in_utc = compile_one({**raw, "options": {"safebeat": excluded}}).digest
    assert in_utc == "6de68b84ec33a9ef"  # what earlier versions stored
    assert digests["UTC"] == in_utc
    fixed = timezone(timedelta(hours=5))
    assert compile_one({**raw, "options": {"safebeat": excluded}}, zone=fixed).digest != in_utc
    # without excluded days the zone changes no window of an interval: digests as they were
    assert compile_one({**raw, "options": {"safebeat": {"timezone": "Europe/Paris"}}}).digest == (
        compile_one(raw).digest
    )
