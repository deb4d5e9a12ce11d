"""What `safebeat exporter` reads from the store: each entry's next due window, pause, last
success and failure, and the namespace's totals, on a controlled store clock."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from safebeat.config import Config
from safebeat.entries import Entry, compile_entry
from safebeat.errors import StoreUnavailable
from safebeat.identity import Replica, task_id_for
from safebeat.ops import schedule_health
from safebeat.ops.exporter import EXPORTER_SERIES, ScheduleHealthCollector
from safebeat.ops.schedule_health import NamespaceHealth, namespace_health
from safebeat.records import LeasedRun, NewClaim, Outcome, Pause, RunEnd, TickPlan
from safebeat.stores.memory import MemoryStore
from tests.unit.test_monitoring import documented_metrics

NAMESPACE = "health"
REPLICA = Replica("host-a", 1, "aaaaaa")
GRACE = timedelta(seconds=60)
#: A Friday, 17:00 UTC.
FRIDAY_FIVE = datetime(2030, 1, 4, 17, 0, tzinfo=timezone.utc)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def compiled(name: str, schedule: Any) -> Entry:
    return compile_entry(
        name,
        {"task": "t.run", "schedule": schedule},
        app_timezone=timezone.utc,
        config=Config(namespace=NAMESPACE),
    )


def registered(store: MemoryStore, *entries: Entry) -> dict[str, Entry]:
    store.register(NAMESPACE, [e.definition for e in entries], REPLICA)
    return {e.name: e for e in entries}


def decide(store: MemoryStore, name: str, window: datetime) -> None:
    """A replica claims `window` of `name` and publishes it."""
    plan = TickPlan(
        claims=[NewClaim(name, window, task_id_for(NAMESPACE, name, window), "t.run")],
        advances={name: window},
    )
    result = store.tick(NAMESPACE, [name], lambda now, states: plan, replica=REPLICA)
    assert result is not None
    store.record_publish(NAMESPACE, [c.id for c in result.claimed], {})


def run(store: MemoryStore, name: str, window: datetime, outcome: Outcome) -> None:
    leased = LeasedRun(name, window, "worker@host:1", 0)
    store.start_execution(NAMESPACE, leased, lease=timedelta(minutes=5))
    store.finish_execution(NAMESPACE, leased, RunEnd(outcome, timedelta(seconds=1)))


def health(store: MemoryStore, entries: dict[str, Entry], max_entries: int = 100) -> Any:
    return namespace_health(
        store,
        NAMESPACE,
        entries,
        grace=GRACE,
        claim_timeout=timedelta(seconds=30),
        max_entries=max_entries,
        recent_rows=1000,
    )


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def detail(result: NamespaceHealth, name: str) -> Any:
    return next(e for e in result.detailed if e.name == name)


def test_a_business_hours_crontab_is_not_overdue_at_night() -> None:
    """After Friday's last slot, the next due window is Monday 09:00: nothing is late."""
    clock = Clock(FRIDAY_FIVE - timedelta(hours=8))
    store = MemoryStore(clock=clock)
    from celery.schedules import crontab

    entries = registered(store, compiled("office", crontab("*/5", "9-17", day_of_week="1-5")))
    decide(store, "office", FRIDAY_FIVE + timedelta(minutes=55))
    clock.now = FRIDAY_FIVE + timedelta(hours=10)  # Saturday, 03:00
    result = health(store, entries)
    assert detail(result, "office").next_due == datetime(2030, 1, 7, 9, 0, tzinfo=timezone.utc)
    assert result.overdue == 0


def test_an_interval_entry_nobody_decides_is_overdue_past_the_grace() -> None:
    """Its oldest undecided window stays put, in the past: overdue once older than the grace."""
    clock = Clock(FRIDAY_FIVE)
    store = MemoryStore(clock=clock)
    entries = registered(store, compiled("minutely", 60.0))
    clock.now += timedelta(seconds=90)
    assert health(store, entries).overdue == 0  # due 30 s ago: within the grace
    clock.now += timedelta(minutes=10)
    result = health(store, entries)
    assert result.overdue == 1
    assert detail(result, "minutely").next_due < clock.now - GRACE


def test_a_paused_entry_is_not_overdue_and_one_paused_until_is_due_after_its_end() -> None:
    """No end: no next due window at all; with an end: the first window from the end on."""
    clock = Clock(FRIDAY_FIVE)
    store = MemoryStore(clock=clock)
    entries = registered(store, compiled("held", 60.0), compiled("held-until", 60.0))
    store.set_paused(NAMESPACE, "held", Pause(True, note="maintenance"))
    until = FRIDAY_FIVE + timedelta(hours=2)
    store.set_paused(NAMESPACE, "held-until", Pause(True, until=until))
    clock.now += timedelta(hours=1)
    result = health(store, entries)
    assert result.overdue == 0
    assert result.paused == 2
    assert detail(result, "held").next_due is None
    assert detail(result, "held").paused
    assert detail(result, "held-until").next_due == until
    assert detail(result, "held-until").paused_until == until


def test_a_finished_entry_has_no_next_due_window() -> None:
    """A one-off entry whose window was decided has nothing left to be late for."""
    clock = Clock(FRIDAY_FIVE)
    store = MemoryStore(clock=clock)

    entries = registered(
        store,
        compile_entry(
            "once",
            {
                "task": "t.run",
                "schedule": 60.0,
                "options": {"safebeat": {"end": (FRIDAY_FIVE + timedelta(minutes=2)).isoformat()}},
            },
            app_timezone=timezone.utc,
            config=Config(namespace=NAMESPACE),
        ),
    )
    decide(store, "once", FRIDAY_FIVE + timedelta(minutes=2))
    clock.now += timedelta(days=1)
    result = health(store, entries)
    assert detail(result, "once").next_due is None
    assert result.overdue == 0


def test_the_latest_outcomes_give_last_success_last_failure_and_the_failing_count() -> None:
    """An entry whose latest run failed counts as failing, with both instants exported."""
    clock = Clock(FRIDAY_FIVE)
    store = MemoryStore(clock=clock)
    entries = registered(store, compiled("flaky", 60.0), compiled("fine", 60.0))
    first, second = FRIDAY_FIVE + timedelta(minutes=1), FRIDAY_FIVE + timedelta(minutes=2)
    clock.now = first
    decide(store, "flaky", first)
    decide(store, "fine", first)
    run(store, "flaky", first, Outcome.SUCCESS)
    run(store, "fine", first, Outcome.SUCCESS)
    clock.now = second
    decide(store, "flaky", second)
    run(store, "flaky", second, Outcome.FAILURE)
    result = health(store, entries)
    assert result.failing == 1
    flaky = detail(result, "flaky")
    assert (flaky.last_success, flaky.last_failure) == (first, second)
    assert flaky.last_sent_window == second


def test_past_the_cap_the_overdue_entries_are_detailed_first() -> None:
    """With --max-entries 1, the one entry shown is the overdue one; the other is counted."""
    clock = Clock(FRIDAY_FIVE)
    store = MemoryStore(clock=clock)
    entries = registered(store, compiled("a-fine", 3600.0), compiled("z-late", 60.0))
    decide(store, "a-fine", FRIDAY_FIVE)
    clock.now += timedelta(minutes=10)
    result = health(store, entries, max_entries=1)
    assert [e.name for e in result.detailed] == ["z-late"]
    assert (result.entries, result.omitted, result.overdue) == (2, 1, 1)


def test_the_collector_says_when_it_cannot_read_and_serves_no_stale_reading() -> None:
    """Every documented series is rendered, labelled safebeat_namespace. A failed reading
    sets safebeat_exporter_store_up to 0, counts an error and withdraws the last reading's
    values (a stale 0 overdue would look healthy, a stale due window would page for a
    window decided since); when the last good reading was stays. The next good reading
    serves everything again."""
    clock = Clock(FRIDAY_FIVE)
    store = MemoryStore(clock=clock)
    entries = registered(store, compiled("minutely", 60.0))
    clock.now += timedelta(minutes=10)
    down = False

    def read() -> NamespaceHealth:
        if down:
            raise StoreUnavailable("the store is down")
        return health(store, entries)

    collector = ScheduleHealthCollector(NAMESPACE, read, lambda: 0.0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    label = {"safebeat_namespace": "health"}
    assert samples(generate_latest(registry).decode()) == {
        "safebeat_exporter_store_up": [(label, 0.0)],
        "safebeat_schedule_read_errors_total": [(label, 0.0)],
    }
    assert collector.refresh()
    before = generate_latest(registry).decode()
    down = True
    assert not collector.refresh()
    after = samples(generate_latest(registry).decode())
    due = FRIDAY_FIVE + timedelta(seconds=60)
    assert samples(before)["safebeat_entry_next_due_timestamp_seconds"] == [
        ({"entry": "minutely", "safebeat_namespace": "health"}, due.timestamp())
    ]
    assert 'safebeat_schedule_overdue_entries{safebeat_namespace="health"} 1.0' in before
    assert 'safebeat_exporter_store_up{safebeat_namespace="health"} 1.0' in before
    for series in EXPORTER_SERIES:
        assert f"# HELP {series.name}" in before
    assert after == {
        "safebeat_exporter_store_up": [(label, 0.0)],
        "safebeat_schedule_read_timestamp_seconds": [(label, clock.now.timestamp())],
        "safebeat_schedule_read_duration_seconds": [(label, 0.0)],
        "safebeat_schedule_read_errors_total": [(label, 1.0)],
    }
    down = False
    assert collector.refresh()
    assert samples(generate_latest(registry).decode()) == {
        **samples(before),
        "safebeat_schedule_read_errors_total": [(label, 1.0)],
    }


@pytest.mark.parametrize("max_entries", [0])
def test_totals_only_serve_no_per_entry_series(max_entries: int) -> None:
    """--max-entries 0: the aggregates stay, no entry has a series of its own."""
    clock = Clock(FRIDAY_FIVE)
    store = MemoryStore(clock=clock)
    entries = registered(store, compiled("minutely", 60.0))
    result = health(store, entries, max_entries=max_entries)
    assert (result.detailed, result.omitted, result.entries) == ((), 1, 1)


def test_docs_list_exactly_the_series_the_exporter_serves() -> None:
    """docs/metrics.md's exporter table and EXPORTER_SERIES name the same series and kinds."""
    served = {s.name + ("_total" if s.counter else ""): s for s in EXPORTER_SERIES}
    documented = documented_metrics("From the exporter")
    assert set(documented) == set(served)
    for name, kind in documented.items():
        assert kind == ("counter" if served[name].counter else "gauge"), name


def test_an_unexpected_error_in_a_reading_is_counted_and_the_exporter_goes_on() -> None:
    """A bug in one reading costs that reading, not the thread that reads every interval."""
    calls = []

    def read() -> NamespaceHealth:
        calls.append(1)
        raise ValueError("a schedule that cannot be computed")

    collector = ScheduleHealthCollector(NAMESPACE, read, lambda: 0.0)
    assert not collector.refresh()
    assert not collector.refresh()
    assert (len(calls), collector.read_errors, collector.reading) == (2, 2, None)
    assert not collector.store_up


def test_a_later_reading_computes_only_the_due_windows_that_moved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the previous reading remembered, an entry whose state did not change is not
    computed again; one that a replica decided meanwhile is, and gets its new window."""
    clock = Clock(FRIDAY_FIVE)
    store = MemoryStore(clock=clock)
    entries = registered(store, compiled("quiet", 3600.0), compiled("busy", 60.0))
    computed: list[str] = []
    real = schedule_health.next_due

    def counting(state: Any, entry: Any, now: datetime) -> datetime | None:
        computed.append(state.name)
        return real(state, entry, now)

    monkeypatch.setattr(schedule_health, "next_due", counting)
    remembered = schedule_health.DueWindows()

    def reading() -> NamespaceHealth:
        return namespace_health(
            store, NAMESPACE, entries, grace=GRACE, claim_timeout=timedelta(seconds=30),
            max_entries=10, recent_rows=100, remembered=remembered,
        )  # fmt: skip

    reading()
    assert sorted(computed) == ["busy", "quiet"]
    computed.clear()
    clock.now += timedelta(seconds=61)
    decide(store, "busy", FRIDAY_FIVE + timedelta(seconds=60))
    result = reading()
    assert computed == ["busy"]
    assert detail(result, "busy").next_due == FRIDAY_FIVE + timedelta(seconds=120)
    assert detail(result, "quiet").next_due == FRIDAY_FIVE + timedelta(hours=1)
