"""One backoff for everything safebeat retries: an unreachable store, a broker that is down."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass
class Backoff:
    """Exponential backoff with jitter, remembering until when to leave the service alone.

    Each `failed(now)` doubles the delay from `first` up to `cap` (times a jitter of
    ±20 %, so replicas that failed together do not retry together) and sets `until`;
    `waiting(now)` is true before then. `succeeded()` starts the doubling over.
    `now` is a monotonic clock reading in seconds.
    """

    first: float = 1.0
    cap: float = 30.0
    failures: int = 0
    until: float = 0.0

    def failed(self, now: float) -> float:
        """Count one more failure; return the delay before the next attempt."""
        delay: float = min(self.cap, self.first * 2.0**self.failures)
        delay *= random.uniform(0.8, 1.2)  # noqa: S311 - jitter, not cryptography
        self.failures += 1
        self.until = now + delay
        return delay

    def waiting(self, now: float) -> bool:
        """Whether `now` is still inside the delay set by the last failure."""
        return now < self.until

    def succeeded(self) -> None:
        """The service answered: the next failure waits `first` again."""
        self.failures = 0
