"""A tick with more entries due than its first round claims publishes each round on a
thread of its own while it claims the next: nothing is sent twice, the claims never
handed to the broker go back to the store, and a signal during the next claim stops the
publishing thread. On a memory store and a controlled clock."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery

from safebeat import Scheduler
from safebeat.beat.pipeline import BackgroundPublish
from safebeat.errors import StoreUnavailable
from safebeat.records import Claim
from safebeat.stores.memory import MemoryStore
from safebeat.testing import FakeClock, memory_scheduler
from tests.unit.test_scheduler import START, drain, make_app, windows_sent

NAMES = [f"e{i:02}" for i in range(12)]


class WatchedStore(MemoryStore):
    """A memory store that remembers the claims handed back to it and the ids each
    `record_publish` was given, raises `interrupt` from its tick number `interrupt_at`,
    calls `before_record` before each record and fails record number `fail_record`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.released: list[str] = []
        self.ticks = 0
        self.interrupt_at: int | None = None
        self.interrupt: BaseException = SystemExit(0)
        self.records: list[list[int]] = []
        self.before_record: Callable[[], object] | None = None
        self.fail_record: int | None = None

    def tick(self, *args: Any, **kwargs: Any) -> Any:
        self.ticks += 1
        if self.ticks == self.interrupt_at:
            raise self.interrupt
        return super().tick(*args, **kwargs)

    def release_claims(
        self, namespace: str, claims: Sequence[Claim], *, replica: Any, timeout: timedelta
    ) -> None:
        self.released.extend(claim.entry for claim in claims)
        super().release_claims(namespace, claims, replica=replica, timeout=timeout)

    def record_publish(self, namespace: str, sent: Sequence[int], failed: Any) -> None:
        self.records.append(list(sent))
        if self.before_record is not None:
            self.before_record()
        if len(self.records) == self.fail_record:
            raise StoreUnavailable("connection reset while recording")
        super().record_publish(namespace, sent, failed)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


def burst(queue: str, clock: FakeClock) -> tuple[Celery, WatchedStore, Scheduler]:
    """Twelve entries due at once, claimed in rounds of 4 then 8."""
    app = make_app(queue, {name: {"task": "t.run", "schedule": 60.0} for name in NAMES})
    store = WatchedStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    scheduler.first_round = 4
    scheduler.tick()  # registers; the first windows are due a minute later
    drain(app, queue)
    clock.advance(60)
    return app, store, scheduler


def sent_entries(app: Celery, queue: str) -> list[str]:
    counts = windows_sent(drain(app, queue))
    assert max(counts.values(), default=1) == 1, counts
    return sorted(entry for entry, _ in counts)


def publishing_thread(scheduler: Scheduler) -> threading.Thread | None:
    return scheduler.engine.publish_thread.thread


def test_one_publishing_thread_serves_every_round_until_close(clock: FakeClock, queue: str) -> None:
    """Rounds of several ticks go out on one thread (none is started per round); close()
    ends it, and a later tick starts one again."""
    app, _store, scheduler = burst(queue, clock)
    assert publishing_thread(scheduler) is None  # nothing to publish yet: no thread
    scheduler.tick()
    first = publishing_thread(scheduler)
    clock.advance(60)
    scheduler.tick()
    assert len(sent_entries(app, queue)) == 2 * len(NAMES)
    assert first is not None
    assert publishing_thread(scheduler) is first
    scheduler.engine.publish_thread.close()
    assert not first.is_alive()
    clock.advance(60)
    scheduler.tick()
    assert len(sent_entries(app, queue)) == len(NAMES)
    assert publishing_thread(scheduler) not in (None, first)
    scheduler.close()
    assert publishing_thread(scheduler) is None


def test_every_round_of_a_burst_is_sent_once_in_one_tick(clock: FakeClock, queue: str) -> None:
    app, store, scheduler = burst(queue, clock)
    ticks_before = store.ticks
    scheduler.tick()
    assert sent_entries(app, queue) == NAMES
    assert store.ticks - ticks_before == 2  # rounds of 4 and 8
    assert store.released == []


def test_broker_down_mid_pipeline_sends_nothing_twice_and_hands_back_the_rest(
    clock: FakeClock, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker fails at the third message of the first round while the second round is
    claimed: that round is never handed to the broker, so its claims go back to the store
    with the first round's unsent one; the message that raised waits the claim timeout."""
    app, store, scheduler = burst(queue, clock)
    real_send = scheduler.publisher.send
    handed: list[str] = []

    def failing_send(producer: Any, entry: Any, claim: Claim, **options: Any) -> None:
        handed.append(claim.entry)
        if len(handed) == 3:
            raise ConnectionError("connection reset by peer")
        real_send(producer, entry, claim, **options)

    monkeypatch.setattr(scheduler.publisher, "send", failing_send)
    scheduler.tick()
    sent = sent_entries(app, queue)
    assert sent == handed[:2]
    assert sorted(store.released) == sorted(set(NAMES) - set(handed))
    assert len(store.released) == len(NAMES) - 3
    assert scheduler.dispatcher.backoff.failures == 1


def test_claims_grown_too_old_in_a_pipelined_tick_are_handed_back(
    clock: FakeClock, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Publishing stalls past half the claim timeout: what was not handed over yet, in
    either round, goes back to the store; nothing is sent twice."""
    app, store, scheduler = burst(queue, clock)
    real_send = scheduler.publisher.send
    stall = scheduler.safebeat_config.claim_timeout.total_seconds() / 2 + 1
    second_round = store.ticks + 2

    def stalling_send(producer: Any, entry: Any, claim: Claim, **options: Any) -> None:
        real_send(producer, entry, claim, **options)
        # The stall starts once the second round's claim began: before it, the stalled
        # clock would end the tick before that round is claimed at all.
        waited = time.monotonic() + 10
        while store.ticks < second_round and time.monotonic() < waited:
            time.sleep(0.001)
        clock.advance(stall)

    monkeypatch.setattr(scheduler.publisher, "send", stalling_send)
    scheduler.tick()
    sent = sent_entries(app, queue)
    assert sent
    assert not set(sent) & set(store.released)
    assert sorted([*sent, *store.released]) == NAMES


def test_a_signal_during_the_next_claim_stops_the_publishing_thread(
    clock: FakeClock, queue: str
) -> None:
    """SystemExit (Celery's SIGTERM handler) raised while the next round is claimed leaves
    the tick at once, the first round's publish stopped; close() still works and ends the
    publishing thread."""
    app, store, scheduler = burst(queue, clock)
    store.interrupt_at = store.ticks + 2  # the second round's claim
    with pytest.raises(SystemExit):
        scheduler.tick()
    assert len(set(sent_entries(app, queue))) <= 4
    scheduler.close()
    assert publishing_thread(scheduler) is None


def test_a_signal_while_the_tick_waits_for_the_publish_stops_the_round_at_its_next_message(
    clock: FakeClock, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM's SystemExit raised while the tick waits for the publishing thread stops the
    round at its next message: close() does not let the thread publish the rest of the
    round, which nobody would record as sent (issue 29, hole 5)."""
    app, _store, scheduler = burst(queue, clock)
    real_send = scheduler.publisher.send
    handed = threading.Event()

    def slow_send(*args: Any, **kwargs: Any) -> None:
        real_send(*args, **kwargs)
        handed.set()
        time.sleep(0.05)

    monkeypatch.setattr(scheduler.publisher, "send", slow_send)
    real_result = BackgroundPublish.result
    interrupted: list[bool] = []

    def result(self: BackgroundPublish[Any], *, stop: bool = False) -> Any:
        if not stop and not interrupted:
            interrupted.append(True)
            handed.wait(5)
            raise SystemExit(0)  # the signal arrives while the tick waits here
        return real_result(self, stop=stop)

    monkeypatch.setattr(BackgroundPublish, "result", result)
    with pytest.raises(SystemExit):
        scheduler.tick()
    scheduler.close()
    assert 1 <= len(sent_entries(app, queue)) <= 2  # the first round has 4


def test_a_store_error_while_a_signal_hands_back_the_next_round_still_stops_the_tick(
    clock: FakeClock, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM's SystemExit raised while the tick waits for the publishing thread, and the
    store fails as the next round is handed back: the SystemExit still leaves the tick.
    Before, the store error took its place and the tick backed off and went on claiming
    and publishing after SIGTERM (found by the simulation, seed 429)."""
    _app, store, scheduler = burst(queue, clock)
    real_result = BackgroundPublish.result
    signalled: list[bool] = []

    def result(self: BackgroundPublish[Any], *, stop: bool = False) -> Any:
        if not stop and not signalled:
            signalled.append(True)
            raise SystemExit(0)  # the signal arrives while the tick waits here
        return real_result(self, stop=stop)

    def unreachable(*args: Any, **kwargs: Any) -> None:
        raise StoreUnavailable("connection reset")

    monkeypatch.setattr(BackgroundPublish, "result", result)
    monkeypatch.setattr(store, "release_claims", unreachable)
    monkeypatch.setattr(store, "record_publish", unreachable)
    with pytest.raises(SystemExit):
        scheduler.tick()
    assert signalled
    monkeypatch.undo()
    scheduler.close()


def test_a_store_error_during_the_next_claim_still_records_the_round_sent(
    clock: FakeClock, queue: str
) -> None:
    """The store fails while the second round is claimed: the first round, already on
    its way, is published and recorded; the tick backs off; nothing is sent twice."""
    app, store, scheduler = burst(queue, clock)
    store.interrupt_at = store.ticks + 2
    store.interrupt = StoreUnavailable("connection refused")
    scheduler.tick()
    first = sent_entries(app, queue)
    assert len(first) == 4
    sent_rows = [r for name in first for r in store.history("unit", name) if r.sent_at]
    assert len(sent_rows) == 4
    assert scheduler.engine.guard.backoff.failures == 1


def test_a_round_is_recorded_sent_while_the_next_one_is_published(
    clock: FakeClock, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first round's record waits for the second round's first message: it comes,
    because the second round goes to the broker as soon as the first is on it, and the
    first is recorded meanwhile. Nothing is sent twice, every claim is recorded sent."""
    app, store, scheduler = burst(queue, clock)
    real_send = scheduler.publisher.send
    second_round_sending = threading.Event()
    first_round: set[str] = set()

    def send(producer: Any, entry: Any, claim: Claim, **options: Any) -> None:
        if len(first_round) < 4:
            first_round.add(claim.entry)
        elif claim.entry not in first_round:
            second_round_sending.set()
        real_send(producer, entry, claim, **options)

    waited: list[bool] = []
    store.before_record = lambda: waited.append(second_round_sending.wait(10))
    monkeypatch.setattr(scheduler.publisher, "send", send)
    scheduler.tick()
    assert waited[0], "the first round was recorded before the second was published"
    assert sent_entries(app, queue) == NAMES
    assert [len(ids) for ids in store.records] == [4, 8]
    assert all(r.sent_at for name in NAMES for r in store.history("unit", name))


def test_a_store_error_recording_a_round_still_publishes_and_records_the_next(
    clock: FakeClock, queue: str
) -> None:
    """Recording the first round fails while the second is on its way to the broker: the
    tick waits for that publish and records it, and backs off; nothing is sent twice.
    The first round's claims stay unsent, for the take-over after the claim timeout
    (same task ids)."""
    app, store, scheduler = burst(queue, clock)
    store.fail_record = 1
    scheduler.tick()
    assert sent_entries(app, queue) == NAMES
    assert [len(ids) for ids in store.records] == [4, 8]
    recorded = {name for name in NAMES for r in store.history("unit", name) if r.sent_at}
    assert len(recorded) == 8
    assert scheduler.engine.guard.backoff.failures == 1
    scheduler.close()
    assert publishing_thread(scheduler) is None


def test_rounds_one_after_the_other_hand_back_the_next_round_when_a_record_fails(
    clock: FakeClock, queue: str
) -> None:
    """Without pipelining (a claim timeout too short for it), a round is recorded before
    the next one is published; when that record fails, the next round was never handed
    to the broker, so its claims go back to the store at once."""
    app, store, scheduler = burst(queue, clock)
    scheduler.pipelined = False
    store.fail_record = 1
    scheduler.tick()
    assert len(sent_entries(app, queue)) == 4
    assert sum(len(ids) for ids in store.records) == 4  # only the first round was sent
    assert len(store.released) == 8
    assert scheduler.engine.guard.backoff.failures == 1
