"""Deleting old history in batches: each a short transaction of its own, while time allows."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

#: Dispatch rows one batch deletes in the SQL stores: tens of milliseconds of a write
#: transaction, so no statement timeout ends it and no tick waits long behind it.
PRUNE_BATCH = 5000


def in_batches(
    delete_batch: Callable[[int], int],
    *,
    batch: int = PRUNE_BATCH,
    budget: timedelta | None,
    monotonic: Callable[[], float] = time.monotonic,
) -> int:
    """Call `delete_batch(batch)` (it deletes at most `batch` rows, oldest first, in a
    transaction of its own, and returns how many) until one deletes fewer than `batch` or
    `budget` has passed since the first began; return the rows deleted.

    One batch always runs, whatever the budget; without a budget, batches run until none
    is left. What a budget leaves is the next call's."""
    deadline = None if budget is None else monotonic() + budget.total_seconds()
    deleted = 0
    while True:
        count = delete_batch(batch)
        deleted += count
        if count < batch or (deadline is not None and monotonic() >= deadline):
            return deleted
