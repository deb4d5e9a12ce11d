"""Message templates built between ticks (`safebeat.beat.prewarming`): the messages they
send are Celery's own, an entry edited since is never sent from its old template, and
prewarming stops when its slice of the idle time is up."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timezone
from typing import Any

import pytest
from celery import Celery, signals

from safebeat import hooks
from safebeat.beat.dispatch import Dispatcher
from safebeat.beat.due_times import DueTimes
from safebeat.beat.engine import EngineHooks, TickEngine
from safebeat.beat.prewarming import AHEAD, Prewarming
from safebeat.beat.publishing import Publisher
from safebeat.beat.tuning import Tuning
from safebeat.config import Config
from safebeat.entries import Entry, compile_entry
from safebeat.identity import Replica
from safebeat.records import Claim
from safebeat.stores.memory import MemoryStore
from safebeat.testing import FakeClock
from tests.unit.test_publishing import (
    CASES,
    RETRY,
    WINDOWS,
    claim_for,
    make_app,
    plain_entry,
    queues_of,
    receive_all,
    without_expiry,
)
from tests.unit.test_tick_engine import START, Link


@pytest.mark.parametrize("case", CASES)
def test_a_prewarmed_entry_sends_the_message_apply_async_would(case: str) -> None:
    """Templates built ahead of any window send, window after window, what Celery's full
    path sends: the same fields, the headers in the same order."""
    app = make_app()
    raw = CASES[case]
    if case == "queue option":
        raw = {**raw, "options": {"queue": queues_of(app)[1]}}
    entry = compile_entry("e", raw, app_timezone=timezone.utc, config=Config(namespace="pub"))
    sent = []
    for publisher in (Publisher(app, direct=False), Publisher(app)):
        publisher.prewarm(entry)
        with app.producer_or_acquire() as producer:
            for window in WINDOWS:
                publisher.send(producer, entry, claim_for("e", window), retry_policy=RETRY)
        sent.append(receive_all(app))
    full, prewarmed = sent
    for first, second in zip(without_expiry(full), without_expiry(prewarmed), strict=True):
        for a, b in zip(first, second, strict=True):
            assert (a is None) == (b is None)
            if a is not None and b is not None:
                assert abs(b - a) < 5
    assert prewarmed == full
    assert [list(m["headers"]) for m in prewarmed] == [list(m["headers"]) for m in full]


def test_prewarming_builds_the_template_before_any_window() -> None:
    app = make_app()
    publisher = Publisher(app)
    publisher.prewarm(plain_entry("e", args=[3]))
    assert publisher._plans["e"].template is not None


def test_an_entry_edited_after_its_template_was_built_never_sends_the_old_one() -> None:
    app = make_app()
    publisher = Publisher(app)
    publisher.prewarm(plain_entry("e", args=[1]))
    edited = plain_entry("e", args=[2], options={"headers": {"tenant": "new"}})
    with app.producer_or_acquire() as producer:
        publisher.send(producer, edited, claim_for("e"), retry_policy=RETRY)
    [message] = receive_all(app)
    assert json.loads(message["body"])[0] == [2]
    assert message["headers"]["argsrepr"] == "[2]"
    assert message["headers"]["tenant"] == "new"
    assert message["headers"]["id"] == claim_for("e").task_id


def test_publish_signals_and_hooks_still_fire_for_a_prewarmed_entry() -> None:
    app = make_app()
    publisher = Publisher(app)
    entry = plain_entry("e")
    publisher.prewarm(entry)
    heard: list[str] = []

    def before(sender: Any = None, headers: Any = None, **_: Any) -> None:
        heard.append(f"signal {headers['id']}")

    @contextmanager
    def stamp(publish: hooks.Publish) -> Iterator[None]:
        publish.headers["x-ping"] = "1"
        heard.append(f"hook {publish.claim.task_id}")
        yield

    hook = hooks.around_publish(stamp)
    signals.before_task_publish.connect(before, weak=False)
    try:
        with app.producer_or_acquire() as producer:
            publisher.send(producer, entry, claim_for("e"), retry_policy=RETRY)
    finally:
        signals.before_task_publish.disconnect(before)
        hooks.remove(hook)
    [message] = receive_all(app)
    task_id = claim_for("e").task_id
    assert heard == [f"hook {task_id}", f"signal {task_id}"]
    assert message["headers"]["x-ping"] == "1"


def test_no_template_is_built_ahead_while_publish_signals_have_receivers() -> None:
    app = make_app()
    publisher = Publisher(app)

    def before(**_: Any) -> None: ...

    signals.before_task_publish.connect(before, weak=False)
    try:
        publisher.prewarm(plain_entry("e"))
    finally:
        signals.before_task_publish.disconnect(before)
    assert "e" not in publisher._plans


class Clocked:
    """A publisher stand-in whose every template takes `cost` seconds of `clock`."""

    def __init__(self, clock: FakeClock, cost: float, cache: int = 10_000) -> None:
        self.clock, self.cost, self.plan_cache_size = clock, cost, cache
        self.built: list[str] = []

    def prewarm(self, entry: Entry) -> None:
        self.built.append(entry.name)
        self.clock.advance(self.cost)


def entries_named(names: list[str]) -> dict[str, Entry]:
    return {name: plain_entry(name) for name in names}


def test_prewarming_stops_at_its_deadline_and_goes_on_where_it_stopped() -> None:
    clock = FakeClock(START)
    names = [f"e{i:03}" for i in range(100)]
    due = DueTimes(dict.fromkeys(names, clock.monotonic() + 20))
    publisher = Clocked(clock, cost=0.001)
    prewarming = Prewarming(clock.monotonic)
    start = clock.monotonic()
    assert prewarming.run(due, entries_named(names), publisher, until=start + 0.02)
    # it looks at the clock before each entry: never an entry past the deadline
    assert 20 <= len(publisher.built) <= 21
    assert clock.monotonic() - start < 0.02 + 0.001 + 1e-9
    while prewarming.run(due, entries_named(names), publisher, until=clock.monotonic() + 0.02):
        pass
    assert publisher.built == names  # each once, in the order they are sent
    assert not prewarming.run(due, entries_named(names), publisher, until=clock.monotonic() + 1)
    assert publisher.built == names


def test_prewarming_takes_the_soonest_instants_up_to_the_cache_and_skips_moved_entries() -> None:
    clock = FakeClock(START)
    t = clock.monotonic()
    due = DueTimes({"a": t + 10, "b": t + 10, "c": t + 10, "d": t + 10.001, "e": t + 10.002})
    due.set("far", t + AHEAD + 1)
    due.set("b", t + 20)  # moved on: no longer due at t + 10
    publisher = Clocked(clock, cost=0.0, cache=4)
    prewarming = Prewarming(clock.monotonic)
    entries = entries_named(["a", "b", "c", "d", "e", "far"])
    del entries["c"]  # removed since
    assert not prewarming.run(due, entries, publisher, until=clock.monotonic() + 1)
    # t + 10 and t + 10.001: a, (b moved), (c gone), d; "e" is past the cache bound
    assert publisher.built == ["a", "d"]
    assert not prewarming.run(due, entries, publisher, until=clock.monotonic() + 1)
    assert publisher.built == ["a", "d"]  # each once
    for name in "acd":  # the soonest instants' entries, sent
        due.remove(name)
    assert not prewarming.run(due, entries, publisher, until=clock.monotonic() + 1)
    assert publisher.built == ["a", "d", "e", "b"]  # "far" is not due soon enough yet
    clock.advance(2)
    assert not prewarming.run(due, entries, publisher, until=clock.monotonic() + 1)
    assert publisher.built == ["a", "d", "e", "b", "far"]


def test_the_soonest_instants_are_read_from_the_top_of_the_heap_in_order() -> None:
    times = {f"n{i}": float(i % 50) for i in range(500)}
    due = DueTimes(times)
    soonest = due.soonest(latest=9.5, limit=100)
    assert [at for at, _ in soonest] == [float(i) for i in range(10)]
    assert due.soonest(latest=100, limit=3) == [
        (float(i), sorted(n for n, t in times.items() if t == i)) for i in range(3)
    ]
    assert due.soonest(latest=-1, limit=3) == []


class Recording(Publisher):
    """A real publisher that records what it prewarms and publishes nothing."""

    def __init__(self, clock: FakeClock, cost: float) -> None:
        super().__init__(Celery("prewarm", broker="memory://", set_as_current=False))
        self.clock, self.cost = clock, cost
        self.built: list[str] = []
        self.sent: list[str] = []
        self.log: list[tuple[str, str]] = []

    def prewarm(self, entry: Entry) -> None:
        self.built.append(entry.name)
        self.log.append(("built", entry.name))
        self.clock.advance(self.cost)

    def send(self, producer: Any, entry: Entry, claim: Claim, **options: Any) -> None:
        self.sent.append(claim.entry)
        self.log.append(("sent", claim.entry))


def _idle_engine(
    clock: FakeClock, schedule: dict[str, Any], publisher: Recording
) -> tuple[TickEngine, Tuning]:
    """A set-up engine on a memory store running `schedule` through `publisher`, and its
    tuning (no runtime entries)."""
    config, replica = Config(namespace="prewarm"), Replica("h", 1, "0")
    tuning = Tuning()
    tuning.runs_runtime_entries = False
    engine = TickEngine(
        config,
        replica,
        dispatcher=Dispatcher(
            publisher=publisher,
            claim_timeout=config.claim_timeout,
            replica=replica,
            monotonic=clock.monotonic,
        ),
        broker=Link(),
        hooks=EngineHooks(schedule_source=lambda: schedule, timezone=lambda: timezone.utc),
        tuning=tuning,
        store=MemoryStore(clock=clock.now),
        monotonic=clock.monotonic,
    )
    engine.setup()
    return engine, tuning


def test_an_idle_engine_prewarms_the_next_instant_in_slices_and_ticks_on_time() -> None:
    clock = FakeClock(START)
    schedule = {f"e{i:03}": {"task": "t.run", "schedule": 30.0} for i in range(200)}
    publisher = Recording(clock, cost=0.001)
    engine, tuning = _idle_engine(clock, schedule, publisher)
    sleeps = []
    for _ in range(5000):
        before = clock.monotonic()
        sleep = engine.tick()
        took = clock.monotonic() - before
        sleeps.append(sleep)
        # a slice never outlasts its share of the idle time
        assert took <= tuning.prewarm_slice + publisher.cost + 1e-9
        clock.advance(max(sleep, 1e-6))  # the fake clock keeps microseconds
        if len(publisher.sent) >= 400:
            break
    engine.close()
    assert publisher.sent == sorted(schedule) * 2  # two instants, each entry once
    # each entry's template was built once per instant, between the bursts, before its send
    assert publisher.built[:400] == sorted(schedule) * 2
    assert publisher.log.index(("sent", "e000")) > publisher.log.index(("built", "e199"))
    second_burst = len(publisher.log) - publisher.log[::-1].index(("sent", "e000")) - 1
    assert publisher.log[second_burst - 200 : second_burst] == [
        ("built", name) for name in sorted(schedule)
    ]
    assert min(sleeps) >= 0


def test_a_slice_of_costly_templates_ends_at_its_deadline_not_a_step_after() -> None:
    """Templates of large arguments take milliseconds each (a list of 1,000 ids: about
    2 ms; of 20,000: about 7 ms); a slice looks at the clock before each one, so a tick
    due meanwhile is late by at most the one template being built, not by a step of them."""
    clock = FakeClock(START)
    schedule: dict[str, Any] = {f"e{i:03}": {"task": "t.run", "schedule": 30.0} for i in range(64)}
    schedule["soon"] = {"task": "t.run", "schedule": 1.0}
    publisher = Recording(clock, cost=0.01)
    engine, tuning = _idle_engine(clock, schedule, publisher)
    for _ in range(2000):
        before = clock.monotonic()
        sleep = engine.tick()
        took = clock.monotonic() - before
        assert took <= tuning.prewarm_slice + publisher.cost + 1e-9
        clock.advance(max(sleep, 1e-6))
        if publisher.sent.count("soon") >= 5:
            break
    engine.close()
    assert publisher.sent.count("soon") >= 5
