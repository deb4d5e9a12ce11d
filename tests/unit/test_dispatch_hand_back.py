"""The dispatcher hands back the claims it never handed to the transport when the broker
fails mid-dispatch, so another replica takes them over at its next tick; the claims that
may have reached the broker wait the claim timeout. On a controlled clock."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery

from safebeat.config import Config
from safebeat.dispatch import Dispatched, Dispatcher
from safebeat.entries import Entry, compile_entry
from safebeat.identity import Replica, task_id_for
from safebeat.records import Claim, NewClaim, Reclaim, Status, TickPlan
from safebeat.stores.memory import MemoryStore

NAMESPACE = "hand-back"
CLAIM_TIMEOUT = timedelta(seconds=30)
CUT_OFF = Replica("host-a", 1, "aaaaaa")
HEALTHY = Replica("host-b", 2, "bbbbbb")


class Clock:
    """The store's clock and the dispatcher's monotonic clock, moved by the test alone."""

    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=timezone.utc)

    def store(self) -> datetime:
        return self.now

    def monotonic(self) -> float:
        return self.now.timestamp()


class Connection:
    """What the dispatcher asks of a broker connection: its errors and connect timeout."""

    connection_errors = ()
    connect_timeout = 1.0


class Producer:
    """A producer; with `batching`, one that buffers publishes and flushes each chunk at the
    end of its batch, the flush of chunk number `flush_fails` failing (delivery uncertain)."""

    def __init__(self, *, batching: bool = False, flush_fails: int | None = None) -> None:
        self.supports_batch_publish = batching
        self.flush_fails = flush_fails
        self.flushes = 0

    @contextmanager
    def batch(self, max_size: int) -> Iterator[None]:
        yield
        self.flushes += 1
        if self.flushes == self.flush_fails:
            raise ConnectionError("connection reset by peer while flushing")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> MemoryStore:
    return MemoryStore(clock=clock.store)


def entry(name: str) -> Entry:
    return compile_entry(
        name,
        {"task": "t.run", "schedule": 60.0},
        app_timezone=timezone.utc,
        config=Config(namespace=NAMESPACE),
    )


def claim_five(store: MemoryStore, clock: Clock) -> tuple[list[Claim], dict[str, Entry]]:
    """CUT_OFF claims one window of each of five entries."""
    entries = {name: entry(name) for name in ("a", "b", "c", "d", "e")}
    store.register(NAMESPACE, [e.definition for e in entries.values()], CUT_OFF)
    window = clock.now
    plan = TickPlan(
        claims=[NewClaim(n, window, task_id_for(NAMESPACE, n, window), "t.run") for n in entries]
    )
    result = store.tick(NAMESPACE, list(entries), lambda now, states: plan, replica=CUT_OFF)
    assert result is not None
    return sorted(result.claimed, key=lambda c: c.entry), entries


def dispatch_with_the_broker_failing(
    store: MemoryStore,
    clock: Clock,
    producer: Producer,
    *,
    fail_at: str | None = None,
    chunk: int = 500,
) -> tuple[list[Claim], Dispatched]:
    """CUT_OFF claims five windows and dispatches them; sending the claim of entry `fail_at`
    raises a broker error."""
    claims, entries = claim_five(store, clock)
    dispatcher = Dispatcher(
        Celery("hand-back", set_as_current=False),
        claim_timeout=CLAIM_TIMEOUT,
        replica=CUT_OFF,
        monotonic=clock.monotonic,
    )
    dispatcher.chunk = chunk
    handed: list[str] = []

    def send(producer: Any, entry: Entry, claim: Claim, **options: Any) -> None:
        handed.append(claim.entry)
        if claim.entry == fail_at:
            raise ConnectionError("connection reset by peer")

    dispatcher.publisher.send = send  # type: ignore[method-assign]
    dispatched = dispatcher.dispatch(
        store,
        NAMESPACE,
        claims,
        entries=entries,
        connection=Connection(),
        producer=lambda: producer,
        claimed_at=clock.monotonic(),
    )
    return claims, dispatched


def taken_over_by_the_healthy_replica(store: MemoryStore) -> dict[str, int]:
    """Entry -> attempts of the claims HEALTHY's next tick takes over (its usual reclaim)."""
    result = store.tick(
        NAMESPACE,
        [],
        lambda now, states: TickPlan(),
        replica=HEALTHY,
        reclaim=Reclaim(["a", "b", "c", "d", "e"], CLAIM_TIMEOUT),
    )
    assert result is not None
    return {claim.entry: claim.attempts for claim in result.reclaimed}


def test_claims_after_the_one_whose_publish_failed_are_taken_over_at_once(
    store: MemoryStore, clock: Clock
) -> None:
    """The broker fails on the third message: the first two are sent, the third may have
    reached the broker and waits the claim timeout, the last two are handed back and taken
    over by the healthy replica's next tick, with their task ids and one more attempt."""
    claims, dispatched = dispatch_with_the_broker_failing(store, clock, Producer(), fail_at="c")
    assert [c.entry for c in dispatched.sent] == ["a", "b"]
    assert [c.entry for c in dispatched.unsent] == ["c", "d", "e"]
    assert [c.entry for c in dispatched.released] == ["d", "e"]
    assert dispatched.broker_error is not None
    clock.now += timedelta(seconds=1)
    assert taken_over_by_the_healthy_replica(store) == {"d": 2, "e": 2}
    rows = {r.entry: r for r in store.history(NAMESPACE)}
    assert {rows[n].task_id for n in "de"} == {claims[3].task_id, claims[4].task_id}
    assert rows["c"].status is Status.CLAIMED
    assert rows["c"].replica == CUT_OFF.id
    clock.now += CLAIM_TIMEOUT
    assert taken_over_by_the_healthy_replica(store) == {"c": 2}


def test_a_chunk_whose_flush_failed_waits_and_the_chunks_after_it_are_handed_back(
    store: MemoryStore, clock: Clock
) -> None:
    """Batching two messages per chunk, the second flush fails: its two claims count as
    maybe delivered (kombu cannot tell) and wait; the fifth, never buffered, is handed back."""
    _, dispatched = dispatch_with_the_broker_failing(
        store, clock, Producer(batching=True, flush_fails=2), chunk=2
    )
    assert [c.entry for c in dispatched.sent] == ["a", "b"]
    assert [c.entry for c in dispatched.unsent] == ["c", "d", "e"]
    assert [c.entry for c in dispatched.released] == ["e"]
    clock.now += timedelta(seconds=1)
    assert taken_over_by_the_healthy_replica(store) == {"e": 2}
    clock.now += CLAIM_TIMEOUT
    assert taken_over_by_the_healthy_replica(store) == {"c": 2, "d": 2}


def test_a_claim_taken_over_while_its_dispatch_ran_is_not_handed_back(
    store: MemoryStore, clock: Clock
) -> None:
    """The release is fenced: a claim another replica took over in the meantime stays its."""
    claims, _ = claim_five(store, clock)
    clock.now += CLAIM_TIMEOUT + timedelta(seconds=1)
    assert len(taken_over_by_the_healthy_replica(store)) == len(claims)
    assert store.release_claims(NAMESPACE, claims, replica=CUT_OFF, timeout=CLAIM_TIMEOUT) == 0
    assert taken_over_by_the_healthy_replica(store) == {}
