"""How many due entries one tick claims: smaller after a tick the store ended, larger again
once ticks are quick.

A tick plans and writes inside the store's transaction, which the store ends after
`safebeat_lock_timeout` (PostgreSQL's idle-in-transaction and statement timeouts, MariaDB's
idle timeout, the TTL of Redis's lock). A batch that takes longer than that is rolled back
whole; trying the same batch again would fail the same way for ever. So the batch halves
after each such tick, down to `floor`, and doubles back towards `ceiling` after a tick that
took less than a quarter of the lock timeout (twice the work then still fits in half).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ClaimBatch:
    """The number of due entries the next tick claims (`size`), between `floor` and `ceiling`."""

    ceiling: int
    floor: int = 1
    size: int = 0

    def __post_init__(self) -> None:
        self.floor = max(1, min(self.floor, self.ceiling))
        if not self.size:
            self.size = self.ceiling

    def too_long(self) -> int:
        """The store ended a tick of `size` entries for lasting too long: halve; return the size."""
        self.size = max(self.floor, self.size // 2)
        return self.size

    def finished(self, *, seconds: float, lock_timeout: float) -> int:
        """A tick committed after `seconds`: grow back if it was quick; return the size."""
        if self.size < self.ceiling and seconds < lock_timeout / 4:
            self.size = min(self.ceiling, self.size * 2)
        return self.size
