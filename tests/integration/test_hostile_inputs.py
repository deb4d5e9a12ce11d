"""Hostile input, thrown at the real operator functions and the CLI on real stores, while a
real beat ticks: every value is refused with a named error or works, and an ordinary entry
never misses a window.

Hypothesis draws entry and task names, namespaces, instants (with zones, years 1 and 9999
with offsets), notes, actors and kwargs (nested thousands deep) from the whole space: NUL,
lone surrogates, right-to-left marks, control characters, lengths around each limit
(docs/limits.md). Each value goes to `safebeat.schedules.add`, `pause` (the operation and
`safebeat pause --until`), `trigger` or `backfill` on all nine store variants of
`tests.storevariants`, the contract suite's (memory, SQLite, PostgreSQL, Redis single,
Cluster and Sentinel, and the Django store on SQLite, PostgreSQL and MariaDB), and after
each, `Scheduler.tick()` runs on the same store (a fake clock on memory and SQLite; the
real clock elsewhere). A refusal must be a `SafebeatError` that is not a `StoreError` (the
boundary refused it, not the store); the CLI must answer in one line without
"unexpected". At the end, the ordinary entry (every second, `misfire="all"`, so a slow
example delays a window but cannot skip it) has every window from its first to now, each
sent once.

The same values go to the console's pause, trigger and backfill forms (Starlette's test
client, a valid CSRF token; hostile entry names in the path too) on SQLite, PostgreSQL and
Redis: a page, a redirect, or a 4xx naming the field, never a 500. Drawn `.ics` text gives a
calendar or a ConfigError naming the file, never another exception.

CI runs the `hostile-ci` profile (20 examples per variant and test, about 20 s in all, the Redis
Cluster and Sentinel of the test worker's own included); `make fuzz` runs `hostile-long`
(SAFEBEAT_FUZZ_PROFILE).
"""

from __future__ import annotations

import html
import itertools
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote, quote_plus
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

import safebeat.schedules
import safebeat.web
from safebeat import Scheduler, calendars
from safebeat.cli import main
from safebeat.config import Config, load_config
from safebeat.entries import Entry, compile_entry
from safebeat.errors import ConfigError, SafebeatError, StoreError
from safebeat.identity import Replica
from safebeat.limits import NAME_BYTES, NAMESPACE_BYTES, NOTE_CHARS
from safebeat.ops import operations
from safebeat.records import Definition, Pause, Status
from safebeat.stores.memory import MemoryStore
from safebeat.stores.protocols import Store
from safebeat.stores.sqlite import SqliteStore
from safebeat.testing import FakeClock
from tests import storevariants

UTC = timezone.utc
START = datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)
SECOND = timedelta(seconds=1)
FORM_TYPE = "application/x-www-form-urlencoded"
_COMMON = {
    "deadline": None,
    "suppress_health_check": [
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
}
settings.register_profile("hostile-ci", max_examples=20, **_COMMON)
settings.register_profile("hostile-long", max_examples=1000, **_COMMON)
HOSTILE = settings(settings.get_profile(os.environ.get("SAFEBEAT_FUZZ_PROFILE", "hostile-ci")))

# --- strategies -------------------------------------------------------------------------------

#: Characters that broke something once, or could: NUL, surrogates, bidi marks, escapes,
#: line breaks, the Redis hash tag's braces, path and URL syntax, quotes, wide letters.
SPECIALS = [
    "\x00", "\ud800", "\udfff", "\u202e", "\u200f", "\u2066", "\x1b[31m", "\x1b]0;x\x07",
    "\n", "\r", "\t", "\x7f", "\x85", "\u2028", "\u2029", "\ufeff", "\uffff", "{", "}",
    "%", "/..", "?", "#", ":", "*", "'", '"', "\\", "é", "名", "🙂", " ",
]  # fmt: skip
#: Pieces of text: any code point (lone surrogates too), or one of SPECIALS.
pieces = st.one_of(st.characters(exclude_categories=()), st.sampled_from(SPECIALS))
#: Text from the whole space, and text around each byte limit in one- to four-byte letters.
hostile_text = st.one_of(
    st.lists(pieces, max_size=20).map("".join),
    st.builds(
        lambda letter, count: letter * count,
        st.sampled_from(["x", "é", "名", "🙂", "\x00", "\ud800"]),
        st.integers(NAMESPACE_BYTES // 4 - 2, NAME_BYTES + 2),
    ),
    st.sampled_from(["x" * NAME_BYTES, "x" * (NAME_BYTES + 1), "é" * 128, "x" * 2700]),
)
hostile_names = hostile_text.filter(lambda name: name != "ordinary")
offsets = st.one_of(
    st.sampled_from([UTC, ZoneInfo("Europe/Moscow"), ZoneInfo("Pacific/Kiritimati")]),
    st.timedeltas(-timedelta(hours=23, minutes=59), timedelta(hours=23, minutes=59)).map(timezone),
)
#: Instants anywhere Python can hold them, the years 1 and 9999 with their offsets above all.
hostile_instants = st.one_of(
    st.datetimes(timezones=offsets),
    st.builds(
        lambda moment, zone: moment.replace(tzinfo=zone),
        st.sampled_from(
            [
                datetime(1, 1, 1),
                datetime(1, 1, 1, 23, 59),
                datetime(2, 1, 1),
                datetime(9998, 12, 31, 23, 59, 59, 999999),
                datetime(9999, 1, 1),
                datetime(9999, 12, 31, 23, 59, 59, 999999),
            ]
        ),
        offsets,
    ),
    st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=offsets),
)
hostile_notes = st.one_of(
    st.none(),
    hostile_text,
    st.integers(NOTE_CHARS - 2, NOTE_CHARS + 2).map(lambda n: "n" * n),
)


def _nested(depth: int) -> list[Any]:
    outer = inner = []
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return outer


json_data = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), hostile_text),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(hostile_text, inner, max_size=3)
    ),
    max_leaves=8,
)
hostile_kwargs = st.one_of(
    st.dictionaries(hostile_text, json_data, max_size=3),
    st.integers(50, 6000).map(lambda depth: {"deep": _nested(depth)}),
)
hostile_schedules = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-5, 10**12),
    hostile_instants,
    st.sampled_from(["*/5 * * * *", "0 9 * * 1-5", "61 * * * *", "30s", "0.0001s"]),
    hostile_text,
)
instant_texts = st.one_of(hostile_instants.map(datetime.isoformat), hostile_text)


@dataclass
class Harness:
    """One beat on one store, the operator functions on it, and what the test saw."""

    store: Store
    app: Celery
    namespace: str
    scheduler: Scheduler
    victim: Entry
    url: str | None  # for the CLI; None for the memory store
    advance: Callable[[], None]  # move time on by about a second (fake or real)
    refusals: dict[str, int] = field(default_factory=dict)

    def tick(self) -> None:
        self.advance()
        self.scheduler.tick()

    def attempt(self, what: str, call: Callable[[], object]) -> None:
        """Run `call`: it works, or raises a SafebeatError the boundary (not the store) raised."""
        try:
            call()
        except StoreError as exc:
            raise AssertionError(f"{what}: the store refused a value: {exc}") from exc
        except SafebeatError as exc:
            if not str(exc):
                raise AssertionError(f"{what}: {type(exc).__name__} says nothing") from exc
            name = type(exc).__name__
            self.refusals[name] = self.refusals.get(name, 0) + 1


@pytest.fixture(params=storevariants.VARIANTS)
def harness(request: pytest.FixtureRequest, tmp_path: Any, namespace: str) -> Iterator[Harness]:
    clock = FakeClock(START)
    store: Store
    url: str | None
    if request.param == "memory":
        store, url = MemoryStore(clock=clock.now), None
    elif request.param == "sqlite":
        store = storevariants.open_variant(request, "sqlite", tmp_path, clock=clock.now)
        url = storevariants.url_of(request, "sqlite", tmp_path)
    else:
        store = storevariants.open_variant(request, request.param, tmp_path)
        url = storevariants.url_of(request, request.param, tmp_path)
    fake = request.param in {"memory", "sqlite"}
    app = Celery("hostile", broker="memory://", set_as_current=False)
    app.conf.update(
        result_expires=None,
        task_default_queue=namespace,
        safebeat_url=url or "memory://unused",
        safebeat_namespace=namespace,
        beat_schedule={
            "ordinary": {
                "task": "t.ordinary",
                "schedule": 1.0,
                "options": {"safebeat": {"misfire": "all"}},
            },
            "victim": {"task": "t.victim", "schedule": 60.0},
        },
    )
    store.migrate()
    scheduler = Scheduler(app, store=store, monotonic=clock.monotonic if fake else time.monotonic)
    victim = compile_entry(
        "victim",
        app.conf.beat_schedule["victim"],
        app_timezone=UTC,
        config=Config(namespace=namespace),
    )

    def advance() -> None:
        if fake:
            clock.advance(1)

    harness = Harness(store, app, namespace, scheduler, victim, url, advance)
    harness.tick()
    yield harness
    scheduler.close()
    store.close()


def every_window_sent_once(harness: Harness) -> None:
    """The ordinary entry's windows, from its first to about now, each sent once."""
    store = harness.store
    deadline = time.monotonic() + 10
    while True:  # on a server clock, let the last window come and be sent
        harness.tick()
        rows = store.history(harness.namespace, "ordinary", limit=100_000)
        newest = max((r.window for r in rows), default=None)
        if newest is not None and newest >= store.clock() - 2 * SECOND:
            break
        assert time.monotonic() < deadline, "the ordinary entry stopped getting windows"
        time.sleep(0.2)
    assert [r for r in rows if r.status is not Status.SENT] == []
    windows = sorted(r.window for r in rows)
    assert len(windows) == len(set(windows))
    gaps = [(a, b) for a, b in itertools.pairwise(windows) if b - a != SECOND]
    assert gaps == [], "the ordinary entry missed windows"


def test_hostile_values_are_refused_by_name_and_the_ordinary_entry_keeps_every_window(
    harness: Harness,
) -> None:
    """`schedules.add`, pause, trigger and backfill with hostile names, tasks, namespaces,
    instants, notes, actors and kwargs: each works or is a named SafebeatError (never a
    store's error, never a bare Python one), and a beat ticking meanwhile sends every
    window of an ordinary entry once."""
    h = harness
    namespaces = st.one_of(st.just(h.namespace), hostile_text)
    actors = st.one_of(st.just("ops@host"), hostile_text)

    @HOSTILE
    @given(data=st.data())
    def throw(data: st.DataObject) -> None:
        action = data.draw(st.sampled_from(["add", "pause", "cli pause", "trigger", "backfill"]))
        if action == "add":
            name, task = data.draw(hostile_names), data.draw(st.one_of(hostile_text, st.just("t")))
            schedule, kwargs = data.draw(hostile_schedules), data.draw(hostile_kwargs)
            h.attempt(
                "schedules.add",
                lambda: safebeat.schedules.add(
                    h.app, name, task, schedule, kwargs=kwargs, store=h.store
                ),
            )
        elif action == "pause":
            namespace = data.draw(namespaces)
            name = data.draw(st.one_of(st.just("victim"), hostile_names))
            pause = Pause(True, data.draw(st.none() | hostile_instants), data.draw(hostile_notes))
            actor = data.draw(actors)
            h.attempt(
                "pause",
                lambda: operations.pause_entry(h.store, namespace, name, pause, actor=actor),
            )
        elif action == "cli pause" and h.url is not None:
            name = data.draw(st.one_of(st.just("victim"), hostile_names))
            until, note = (
                data.draw(instant_texts),
                data.draw(st.one_of(hostile_text, hostile_notes)),
            )
            args = ["--url", h.url, "--namespace", h.namespace, "pause", name, "--until", until]
            result = CliRunner().invoke(main, [*args, *([] if note is None else ["--note", note])])
            assert result.exit_code in {0, 1, 2}, result.output
            assert "unexpected" not in result.output, result.output
            assert result.exception is None or isinstance(result.exception, SystemExit)
        elif action == "trigger":
            namespace, actor, note = (
                data.draw(namespaces),
                data.draw(actors),
                data.draw(hostile_notes),
            )
            h.attempt(
                "trigger",
                lambda: operations.trigger(
                    h.app, h.store, namespace, h.victim, actor=actor, note=note
                ),
            )
        elif action == "backfill":
            start, end = data.draw(hostile_instants), data.draw(hostile_instants)
            namespace, note = data.draw(namespaces), data.draw(hostile_notes)
            h.attempt(
                "backfill",
                lambda: operations.backfill(
                    h.app, h.store, namespace, h.victim, start=start, end=end, actor="a", note=note
                ),
            )
        h.tick()

    throw()
    every_window_sent_once(h)
    assert h.refusals  # the hostile values were refused somewhere, by name


@HOSTILE
@given(namespace=hostile_text)
def test_a_namespace_loads_and_round_trips_or_is_a_config_error(namespace: str) -> None:
    """Any text as safebeat_namespace gives a ConfigError naming the setting, or a namespace
    every store can hold (checked here on a SQLite store: what it writes, it reads back)."""
    try:
        config = load_config({"safebeat_namespace": namespace}, environ={})
    except ConfigError as exc:
        if "safebeat_namespace" not in str(exc):
            raise AssertionError(f"the error does not name the setting: {exc}") from exc
        return
    store = SqliteStore("sqlite:///:memory:")
    store.migrate()
    store.register(config.namespace, [Definition("e", "every 1s", "d")], Replica("h", 1, "r"))
    assert store.namespaces() == [config.namespace]
    assert list(store.states(config.namespace)) == ["e"]
    assert "{" not in config.namespace
    assert "}" not in config.namespace


#: Each console form and the fields it takes.
CONSOLE_FORMS = {
    "pause": ("note", "until"),
    "trigger": (),
    "backfill": ("start", "end", "confirm"),
}


def _form_body(fields: dict[str, str]) -> bytes:
    """`fields` url-encoded as a hostile client may send them: lone surrogates too."""
    return "&".join(
        f"{quote_plus(key)}={quote_plus(value, errors='surrogatepass')}"
        for key, value in fields.items()
    ).encode("ascii")


def problem_of(page: str) -> str:
    """The message of the console's problem page, as text."""
    found = re.search(r"<main.*?</main>", page, re.S)
    text = re.sub(r"<[^>]+>", " ", found.group(0) if found else page)
    return " ".join(html.unescape(text).split())


@pytest.mark.parametrize(
    "harness",
    ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres),
     pytest.param("redis", marks=pytest.mark.redis)],
    indirect=True,
)  # fmt: skip
def test_hostile_values_in_the_console_forms_are_refused_naming_the_field(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The console's pause (note, until), trigger and backfill (start, end) forms, posted
    with a valid CSRF token and hostile values, on hostile entry names too: each answers
    a page or a redirect, or a 4xx naming the field (or the entry) it refuses, never a
    500; a beat ticking meanwhile sends every window of an ordinary entry once."""
    h = harness
    # Not a Django project: the console would otherwise read django-celery-beat's rows
    # where another test configured Django in this process.
    monkeypatch.setattr("safebeat.entries.app_entries.periodic_tasks_reason", lambda app: None)
    statuses: dict[int, int] = {}
    with TestClient(safebeat.web.app(h.app), base_url="http://127.0.0.1:8765") as client:
        page = client.get("/entries/victim")
        assert page.status_code == 200, page.text
        found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert found, "the entry's page has no form with a CSRF token"
        token = found.group(1)

        @HOSTILE
        @given(data=st.data())
        def post(data: st.DataObject) -> None:
            action = data.draw(st.sampled_from(sorted(CONSOLE_FORMS)))
            name = data.draw(st.one_of(st.just("victim"), hostile_names))
            fields = {"csrf_token": token}
            for field in CONSOLE_FORMS[action]:
                if field == "confirm":
                    value = data.draw(st.sampled_from(["", "yes"]) | hostile_text)
                elif field == "note":
                    value = data.draw(st.one_of(hostile_text, hostile_notes.map(str)))
                else:
                    value = data.draw(instant_texts)
                fields[field] = value
            path = f"/entries/{quote(name, safe='', errors='surrogatepass')}/{action}"
            response = client.post(
                path, content=_form_body(fields), headers={"content-type": FORM_TYPE}
            )
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            assert response.status_code < 500, response.text
            if response.status_code >= 400:
                said = problem_of(response.text)
                assert response.status_code in {400, 404}, said
                entry = re.search(r"\bentry\b", said) is not None
                named = [f for f in CONSOLE_FORMS[action] if re.search(rf"\b{f}\b", said)]
                assert named or entry, f"{action} refused naming no field: {said}"
                assert response.status_code == 400 or entry, f"a 404 for a field: {said}"
            h.tick()

        post()
    every_window_sent_once(h)
    assert any(code >= 400 for code in statuses), statuses


# --- .ics text --------------------------------------------------------------------------------

#: What an all-day event's properties may hold: dates near the ends of the range and
#: beyond, digits of other scripts, durations too long for any date or for `int`.
ics_values = st.one_of(
    hostile_text,
    st.sampled_from(
        [
            "20261225", "00010101", "99991231", "00000000", "20260230", "2026122", "٢٠٢٦١٢٢٥",
            "P1D", "P0D", "P999999999D", "P" + "9" * 5000 + "D", "P²D", "PT1H", "P1W",
            "FREQ=YEARLY", "FREQ=YEARLY;COUNT=" + "9" * 5000, "FREQ=YEARLY;INTERVAL=²",
            "FREQ=YEARLY;UNTIL=99991231",
            "FREQ=YEARLY;BYMONTH=12;BYMONTHDAY=25", "FREQ=YEARLY;COUNT=0", "FREQ=DAILY",
            "CANCELLED", "VEVENT",
        ]
    ),
)  # fmt: skip
ics_properties = st.sampled_from(
    ["DTSTART;VALUE=DATE", "DTEND;VALUE=DATE", "DTSTART", "DTEND", "DURATION", "RRULE",
     "SUMMARY", "STATUS", "BEGIN", "END", "X-\x00", "dtstart", ""]
)  # fmt: skip
#: Whole lines that broke the parser once, or could.
ICS_LINES = [
    "DURATION:P" + "9" * 5000 + "D",
    "DURATION:P999999999D",
    "RRULE:FREQ=YEARLY;COUNT=" + "9" * 5000,
    "RRULE:FREQ=YEARLY;INTERVAL=²",
    "RRULE:FREQ=YEARLY;COUNT=" + "9" * 4000 + ";INTERVAL=" + "9" * 4000,
    "RRULE:FREQ=YEARLY;UNTIL=" + "9" * 5000,
    "DTEND;VALUE=DATE:٢٠٢٦١٢٢٧",
    "DTEND;VALUE=DATE:99991231",
]
ics_lines = st.one_of(
    st.tuples(ics_properties, ics_values).map(":".join), st.sampled_from(ICS_LINES)
)
ics_events = st.builds(
    lambda start, lines: ["BEGIN:VEVENT", *start, *lines, "END:VEVENT"],
    st.sampled_from([[], ["DTSTART;VALUE=DATE:20261225"], ["DTSTART;VALUE=DATE:99991230"]]),
    st.lists(ics_lines, max_size=6),
)


@st.composite
def ics_texts(draw: st.DrawFn) -> str:
    """iCalendar text: events of hostile properties among hostile lines, folded anywhere
    (a line break then a space or tab), with any line ending."""
    lines = ["BEGIN:VCALENDAR"]
    for event in draw(st.lists(ics_events, max_size=4)):
        lines += event
        lines += draw(st.lists(hostile_text, max_size=2))
    lines.append("END:VCALENDAR")
    folded = []
    for line in lines:
        cuts = sorted(draw(st.lists(st.integers(0, len(line)), max_size=3)))
        pieces = [line[a:b] for a, b in itertools.pairwise([0, *cuts, len(line)])]
        folded.append(draw(st.sampled_from(["\r\n ", "\n\t", "\n "])).join(pieces))
    return draw(st.sampled_from(["\r\n", "\n", "\r", "\x85"])).join(folded)


def test_hostile_ics_text_is_a_calendar_or_an_error_naming_the_file(tmp_path: Any) -> None:
    """Any `.ics` text (folded lines, huge durations and counts, bad dates, control
    characters, digits of other scripts) gives a calendar whose days can be asked and
    described (as an entry's digest does), or a ConfigError naming the file, and the
    event where one is to blame; never another exception."""
    path = tmp_path / "hostile holidays.ics"

    @HOSTILE
    @given(text=ics_texts(), zone=st.sampled_from([UTC, ZoneInfo("Pacific/Kiritimati")]))
    def read(text: str, zone: Any) -> None:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            calendar = calendars.read_ics(path, zone)
        except ConfigError as exc:
            assert path.name in str(exc), exc  # noqa: PT017 - many values, one test
            return
        calendars.describe_calendar(calendar)
        for moment in (START, datetime(9998, 12, 31, tzinfo=UTC), datetime(2, 1, 1, tzinfo=UTC)):
            calendar.excludes(moment)

    read()
