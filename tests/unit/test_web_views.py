"""What the web console derives without a store: schedules in words, marks, pictures, binds."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from celery import Celery

from safebeat.config import load_config
from safebeat.entries import compile_schedule
from safebeat.identity import parse_window
from safebeat.ops.overview import EntryStatus, entry_status
from safebeat.stores.protocols import DispatchRecord, EntryState, Outcome, Status
from safebeat.web import AllowedHosts, is_loopback
from safebeat.web.console import is_late, window_kind
from safebeat.web.instants import example_instant, instant_html, local_zone
from safebeat.web.pictures import lag_chart, window_strip
from safebeat.web.words import in_words

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("schedule", "words"),
    [
        ("every 1s", "every second"),
        ("every 300s", "every 5 minutes"),
        ("every 7200s from 2026-01-01T00:00:00Z", "every 2 hours from 2026-01-01T00:00:00Z"),
        ("every 1.5s", "every 1.5 seconds"),
        ("crontab * * * * * in UTC", "every minute"),
        ("crontab 30 * * * * in UTC", "every hour at minute 30"),
        ("crontab 0 3 * * * in Europe/Moscow", "every day at 03:00 Europe/Moscow"),
        ("crontab 0 9 * * 1-5 in UTC", "every weekday at 09:00 UTC"),
        ("crontab 15 6 * * 0 in UTC", "every Sunday at 06:15 UTC"),
        ("crontab 0 0 1 * * in UTC", "on day 1 of every month at 00:00 UTC"),
        ("exec crontab 0 3 * * * in UTC", "every day at 03:00 UTC (exec)"),
        ("crontab 0,30 9 * * 1 in UTC", "crontab 0,30 9 * * 1 in UTC"),
        ("crontab 30 0 3 * * * in UTC", "every day at 03:00:30 UTC"),
        ("crontab */10 * * * * * in UTC", "crontab */10 * * * * * in UTC"),
        (
            "every 60s not before 2026-03-01T00:00:00Z not after 2026-04-01T00:00:00Z",
            "every minute not before 2026-03-01T00:00:00Z not after 2026-04-01T00:00:00Z",
        ),
        ("crontab 0,30 9 * * 1 in UTC not after 2026-04-01T00:00:00Z",) * 2,
        ("solar sunrise at 55.7,37.6", "solar sunrise at 55.7,37.6"),
    ],
)
def test_a_schedule_reads_in_words_or_stays_as_it_is(schedule: str, words: str) -> None:
    """Common schedules get words; one without words is shown as its text."""
    assert in_words(schedule) == words


def record(**fields: object) -> DispatchRecord:
    values: dict[str, object] = {
        "id": 1,
        "entry": "report",
        "window": NOW - timedelta(minutes=5),
        "status": Status.SENT,
        "task_id": "t",
        "task_name": "tasks.report",
        "reason": None,
        "skipped_from": None,
        "skipped_count": None,
        "replica": "host-a:1:aa",
        "host": "host-a",
        "pid": 1,
        "claimed_at": NOW - timedelta(minutes=5),
        "sent_at": NOW - timedelta(minutes=5) + timedelta(seconds=1),
        "attempts": 1,
        "error": None,
    }
    values.update(fields)
    return DispatchRecord(**values)  # type: ignore[arg-type]


def status(**fields: object) -> EntryStatus:
    values: dict[str, object] = {
        "name": "report",
        "schedule": "every 60s",
        "next_window": None,
        "last_window": None,
        "last_sent": None,
        "last_outcome": None,
        "last_success": None,
        "running_since": None,
        "skipped_recently": 0,
        "paused": False,
    }
    values.update(fields)
    return EntryStatus(**values)  # type: ignore[arg-type]


def test_an_entry_is_late_when_sent_late_or_a_due_window_waits() -> None:
    """Late: the last window sent over a minute after its time, or one due that long ago and
    undecided; a paused entry's waiting windows are not late."""
    assert not is_late(status(last_sent=record()), NOW)
    slow = record(sent_at=NOW - timedelta(minutes=3))
    assert is_late(status(last_sent=slow), NOW)
    waiting = NOW - timedelta(minutes=2)
    assert is_late(status(overdue_window=waiting), NOW)
    assert not is_late(status(overdue_window=NOW - timedelta(seconds=5)), NOW)
    assert not is_late(status(overdue_window=waiting, paused=True), NOW)


def test_each_window_gets_one_kind_for_the_strip() -> None:
    """On time, late, skipped, failed, never ran (only where the worker hook records runs)."""
    assert window_kind(record(), hooked=False) == "on-time"
    assert window_kind(record(), hooked=True) == "never-ran"
    assert window_kind(record(sent_at=NOW), hooked=False) == "late"
    assert window_kind(record(status=Status.SKIPPED, reason="paused"), hooked=False) == "skipped"
    assert window_kind(record(outcome=Outcome.FAILURE), hooked=True) == "failed"
    assert window_kind(record(status=Status.CLAIMED, sent_at=None), hooked=False) == "never-ran"


def test_the_pictures_draw_one_mark_per_window_and_escape_text() -> None:
    """The strip has a cell per row, the chart a dot per sent row; error text is escaped."""
    rows = [
        record(id=3, error="<script>x</script>", status=Status.FAILED, sent_at=None),
        record(id=2, window=NOW - timedelta(minutes=4)),
        record(id=1, status=Status.SKIPPED, reason="paused", skipped_count=2, sent_at=None),
    ]
    strip = window_strip(rows)
    assert strip.count("<rect") == 3
    assert "<script>" not in strip
    assert "&lt;script&gt;" in strip
    assert lag_chart(rows).count("<circle") == 1
    assert "no lag to draw" in lag_chart(rows[:1])


def test_the_lag_chart_has_a_time_axis_under_it() -> None:
    """The first, middle and last sent windows are labelled under the line, in UTC, with
    the date once the windows span more than one day."""
    rows = [record(id=i, window=NOW - timedelta(minutes=i)) for i in range(5)]
    chart = lag_chart(rows)
    first, middle, last = (NOW - timedelta(minutes=m) for m in (4, 2, 0))
    labels = re.findall(r'<text class="time"[^>]*>([^<]+)</text>', chart)
    assert labels == [f"{w:%H:%M:%S}" for w in (first, middle, last)]
    assert ">UTC</text>" in chart
    days = [record(id=i, window=NOW - timedelta(days=i)) for i in range(3)]
    assert re.findall(r'<text class="time"[^>]*>([^<]+)</text>', lag_chart(days))[0] == (
        f"{NOW - timedelta(days=2):%m-%d %H:%M}"
    )


def test_an_instant_reads_to_the_second_with_the_apps_local_time_beside() -> None:
    """No microseconds in the text (the exact value is the title), no wrapping inside the
    value, and the app's zone beside UTC, with the date where the day differs."""
    late_evening = datetime(2026, 3, 1, 23, 30, 5, 123456, tzinfo=timezone.utc)
    html = str(instant_html(late_evening, ZoneInfo("Europe/Berlin")))
    assert 'datetime="2026-03-01T23:30:05.123456Z"' in html
    assert "<span>2026-03-01 23:30:05 UTC</span>" in html
    assert '<span class="local">2026-03-02 00:30:05 CET</span>' in html
    same_day = str(instant_html(late_evening.replace(hour=9), ZoneInfo("Europe/Berlin")))
    assert '<span class="local">10:30:05 CET</span>' in same_day
    assert "local" not in str(instant_html(late_evening, None))
    assert str(instant_html(None, None)) == "-"


def test_the_local_zone_is_the_apps_unless_it_is_utc() -> None:
    def app_in(zone: str) -> Celery:
        app = Celery("zones", set_as_current=False)
        app.conf.timezone = zone
        return app

    assert local_zone(app_in("Europe/Berlin")) == ZoneInfo("Europe/Berlin")
    assert local_zone(app_in("UTC")) is None
    assert local_zone(None) is None


def test_the_examples_in_the_forms_lie_where_the_action_takes_them() -> None:
    """A pause's example end lies in the future, a backfill's example range in the past."""
    assert parse_window(example_instant(NOW, timedelta(days=1))) > NOW
    assert parse_window(example_instant(NOW, -timedelta(hours=1))) < NOW


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("localhost", True), ("::1", True), ("[::1]", True),
     ("0.0.0.0", False), ("10.0.0.5", False), ("example.com", False), ("::", False)],  # noqa: S104
)  # fmt: skip
def test_only_loopback_addresses_count_as_this_machine(host: str, loopback: bool) -> None:
    """`0.0.0.0`, `::` and every other address or name is reachable from elsewhere."""
    assert is_loopback(host) is loopback


STANDALONE = AllowedHosts.bound("127.0.0.1", 8765)
BEHIND_A_PROXY = AllowedHosts.bound("0.0.0.0", 8765, ["ops.example.com"])  # noqa: S104
MOUNTED = AllowedHosts.of([])
ONE_PORT = AllowedHosts.of(["Ops.Example.com:8443", "2001:db8::1"])


@pytest.mark.parametrize(
    ("hosts", "host", "answered"),
    [
        (STANDALONE, "127.0.0.1:8765", True),
        (STANDALONE, "localhost:8765", True),
        (STANDALONE, "LOCALHOST:8765", True),
        (STANDALONE, "[::1]:8765", True),
        (STANDALONE, "127.0.0.1:9999", False),
        (STANDALONE, "localhost", False),
        (STANDALONE, "evil.example:8765", False),
        (STANDALONE, "127.0.0.1.evil.example:8765", False),
        (STANDALONE, "localhost.:8765", False),
        (STANDALONE, "127.0.0.1:8765:1", False),
        (STANDALONE, "[::1", False),
        (STANDALONE, "", False),
        (STANDALONE, None, False),
        (AllowedHosts.bound("::1", 8765), "[::1]:8765", True),
        (AllowedHosts.bound("10.0.0.5", 8765), "10.0.0.5:8765", True),
        (BEHIND_A_PROXY, "ops.example.com", True),
        (BEHIND_A_PROXY, "ops.example.com:443", True),
        (BEHIND_A_PROXY, "0.0.0.0:8765", False),
        (MOUNTED, "localhost:3000", True),
        (MOUNTED, "127.0.0.1", True),
        (MOUNTED, "example.com", False),
        (ONE_PORT, "ops.example.com:8443", True),
        (ONE_PORT, "ops.example.com", False),
        (ONE_PORT, "ops.example.com:443", False),
        (ONE_PORT, "[2001:db8::1]:80", True),
        (AllowedHosts.of(["*"]), "anything.example:1", True),
    ],
)  # fmt: skip
def test_a_console_answers_only_the_hosts_it_was_given(
    hosts: AllowedHosts, host: str | None, answered: bool
) -> None:
    """Standalone: the loopback names and the bound address, on its port, and the names
    given for a proxy; mounted: the loopback names on any port; a name with a port only
    on that port; `*` anything. Names are compared whole, without case."""
    assert hosts.allows(host) is answered


@pytest.mark.parametrize("name", ["https://ops.example.com", "ops@example.com", "ops:99999", ""])
def test_an_allowed_host_that_is_no_host_is_refused(name: str) -> None:
    """A URL, a user, a port beyond 65535 or nothing is a ValueError naming it."""
    with pytest.raises(ValueError, match="give a host name"):
        AllowedHosts.of([name])


def test_the_oldest_due_window_no_replica_decided_is_overdue() -> None:
    """With decisions up to 12:00 and a window every minute, 12:01 is overdue at 12:03; at
    12:00:30 nothing is due yet, and without the schedule nothing can be said."""
    entries, errors = compile_schedule(
        {"report": {"task": "tasks.report", "schedule": 60.0}},
        app_timezone=timezone.utc,
        config=load_config({}),
    )
    assert not errors
    state = EntryState(
        name="report",
        anchor=NOW - timedelta(hours=1),
        defined_at=NOW - timedelta(hours=1),
        last_window=NOW,
        digest="d",
        schedule="every 60s",
    )
    behind = entry_status(state, [], entries["report"], NOW + timedelta(minutes=3))
    assert behind.overdue_window == NOW + timedelta(minutes=1)
    assert (
        entry_status(state, [], entries["report"], NOW + timedelta(seconds=30)).overdue_window
        is None
    )
    assert entry_status(state, [], None, NOW + timedelta(minutes=3)).overdue_window is None
