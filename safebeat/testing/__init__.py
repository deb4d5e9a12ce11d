"""Helpers for testing code that uses safebeat: a controllable clock and an in-memory store;
and, in `safebeat.testing.stores`, the contract suite a store must pass (it needs pytest,
which only that module imports).

from safebeat.testing import FakeClock, memory_scheduler

clock = FakeClock(datetime(2026, 1, 1, tzinfo=timezone.utc))
scheduler = memory_scheduler(app, clock)
clock.advance(seconds=60)
scheduler.tick()          # dispatches what is due at the fake "now"
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from safebeat.beat.scheduler import Scheduler
from safebeat.stores.memory import MemoryStore

__all__ = ["FakeClock", "StoreContract", "memory_scheduler"]


def __getattr__(name: str) -> Any:
    """`StoreContract` from `safebeat.testing.stores`, imported (with pytest) when asked."""
    if name == "StoreContract":
        from safebeat.testing.stores import StoreContract  # noqa: PLC0415 - needs pytest

        return StoreContract
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class FakeClock:
    """A clock that moves only when told: `now()` for the store, `monotonic()` for sleeps."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=timezone.utc)
        if self._now.tzinfo is None:
            raise ValueError("FakeClock needs an aware datetime")
        self._monotonic = 1000.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float = 0.0, **delta: float) -> datetime:
        """Move both clocks forward by `seconds` (plus any timedelta keywords)."""
        step = timedelta(seconds=seconds, **delta)
        if step < timedelta(0):
            raise ValueError("time only moves forward")
        self._now += step
        self._monotonic += step.total_seconds()
        return self._now

    def set(self, instant: datetime) -> None:
        """Jump to `instant` (not earlier than now)."""
        self.advance((instant - self._now).total_seconds())


def memory_scheduler(
    app: Any, clock: FakeClock, store: MemoryStore | None = None, **kwargs: Any
) -> Scheduler:
    """Return a Scheduler on a MemoryStore driven by `clock`; share `store` to model replicas."""
    return Scheduler(
        app,
        store=store or MemoryStore(clock=clock.now),
        monotonic=clock.monotonic,
        **kwargs,
    )
