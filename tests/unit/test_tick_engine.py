"""The tick engine on its own: built from its parts (no Celery app, nothing patched)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from safebeat.beat.dispatch import Dispatcher
from safebeat.beat.engine import EngineHooks, TickEngine
from safebeat.beat.tuning import Tuning
from safebeat.config import Config
from safebeat.identity import Replica, format_window
from safebeat.records import Claim
from safebeat.stores.memory import MemoryStore
from safebeat.testing import FakeClock

START = datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=timezone.utc)
SCHEDULE = {"every-10s": {"task": "t.run", "schedule": 10.0}}


class Broker:
    """A broker that is always up and takes every message: what was sent, by whom."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []

    def publisher(self, replica: Replica) -> Any:
        broker = self

        class Publisher:
            def send(self, producer: Any, entry: Any, claim: Claim, **options: Any) -> None:
                broker.sent.append((replica.host, claim.entry, format_window(claim.window)))

            def forget_declarations(self) -> None:
                pass

        return Publisher()


class Link:
    """The engine's `BrokerLink`: a connection that is up."""

    class Connection:
        connected = True
        connection_errors = ()
        connect_timeout = 4.0

    def __init__(self) -> None:
        self.connection = self.Connection()
        self.producer = object()

    def forget_producer(self) -> None:
        pass


def engine(
    host: str, store: MemoryStore, clock: FakeClock, broker: Broker, hooks: EngineHooks
) -> TickEngine:
    config, replica = Config(namespace="engine"), Replica(host, 1, "0")
    return TickEngine(
        config,
        replica,
        dispatcher=Dispatcher(
            publisher=broker.publisher(replica),
            claim_timeout=config.claim_timeout,
            replica=replica,
            monotonic=clock.monotonic,
        ),
        broker=Link(),
        hooks=hooks,
        tuning=Tuning(),
        store=store,
        monotonic=clock.monotonic,
    )


def test_engines_sharing_a_store_publish_each_window_once_and_say_what_went_out() -> None:
    """Three engines tick in turn for a minute: every window of the entry is published
    once, by one of them, and each engine's `published` hook hears of its own."""
    clock, broker = FakeClock(START), Broker()
    store = MemoryStore(clock=clock.now)
    heard: Counter[str] = Counter()

    def hooks(host: str) -> EngineHooks:
        def published(claims: Sequence[Claim]) -> None:
            heard[host] += len(claims)

        return EngineHooks(
            schedule_source=lambda: SCHEDULE,
            timezone=lambda: timezone.utc,
            published=published,
        )

    engines = [engine(f"r{i}", store, clock, broker, hooks(f"r{i}")) for i in range(3)]
    for each in engines:
        each.setup()
    for _ in range(60):
        for each in engines:
            each.tick()
        clock.advance(1)
    for each in engines:
        each.close()
    windows = Counter((entry, window) for _, entry, window in broker.sent)
    assert sorted(window for _, window in windows) == [
        f"2026-03-01T12:00:{s}Z" for s in (10, 20, 30, 40, 50)
    ]
    assert set(windows.values()) == {1}
    assert heard == Counter(host for host, _, _ in broker.sent)
    assert store.replicas("engine") == []  # close() removed each replica


def test_the_engine_reads_its_tuning_at_every_use() -> None:
    """A knob changed after the engine was built counts from the next tick on: with the
    first round cut to one entry, a tick of three due entries claims one, then the two
    others (each round takes twice as many as the one before)."""
    clock, broker = FakeClock(START), Broker()
    store = MemoryStore(clock=clock.now)
    schedule = {f"e{i}": {"task": "t.run", "schedule": 10.0} for i in range(3)}
    built = engine(
        "r0",
        store,
        clock,
        broker,
        EngineHooks(schedule_source=lambda: schedule, timezone=lambda: timezone.utc),
    )
    rounds: list[Sequence[str]] = []
    claim = built.claim

    def counted(due: Sequence[str], *, reclaim: bool, started: float) -> Any:
        rounds.append(due)
        return claim(due, reclaim=reclaim, started=started)

    built.claim = counted  # type: ignore[method-assign]
    built.setup()
    built.tick()  # looks at every entry: the first windows are 10 s away
    rounds.clear()
    built.tuning.first_round = 1
    clock.advance(10)
    built.tick()
    built.close()
    assert [len(due) for due in rounds] == [1, 2]
    assert len(broker.sent) == 3
