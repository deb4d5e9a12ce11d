"""Beat's wake-ups, on the monotonic clock: when each entry is looked at again, when stale
claims are next taken over, and how long to sleep until the first of those.

The store's clock decides which windows are due; this only decides when to ask.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from safebeat.beat.due_times import DueTimes

logger = logging.getLogger("safebeat.scheduler")

#: Seconds between take-over passes that read a full page of stale claims and took fewer
#: than their limit (the rest belong to other replicas' entries, or to entries nobody
#: defines): the next page is read soon, with the tick lock free in between, so 100,000
#: such claims are read through in about 25 passes of 4,000, not 25 claim timeouts.
READ_ON_PAUSE = 1.0

#: Beat looks for runs whose lease lapsed at least this many times per lease, so a dead
#: worker's window is re-published within 1.2 leases of its last renewal.
PASSES_PER_LEASE = 5


def takeover_period(claim_timeout: timedelta, execution_lease: timedelta) -> float:
    """Seconds between take-over passes: half the claim timeout (an unsent claim is
    re-published within 1.5 claim timeouts) and at most a fifth of the execution lease
    (a dead run is re-published soon after its lease lapses, not a claim timeout later)."""
    per_lease = execution_lease.total_seconds() / PASSES_PER_LEASE
    return min(claim_timeout.total_seconds() / 2, per_lease)


class Pacing:
    """The monotonic instant each entry is due to be planned again (`due_at`) and the next
    take-over of stale claims (`next_reclaim`)."""

    def __init__(self) -> None:
        self.due_at = DueTimes()
        self.next_reclaim = 0.0

    def restart(self, names: Iterable[str], now: float) -> None:
        """Plan every one of `names` at once (after registering them)."""
        self.due_at = DueTimes(dict.fromkeys(names, now))

    def due(self, now: float, limit: int) -> list[str]:
        """Up to `limit` entries whose time has come, the most overdue first: with more due
        entries than one tick claims, entries that were just sent must not come back ahead
        of the ones still waiting."""
        return self.due_at.due(now, limit)

    def reclaimed(
        self, started: float, claim_timeout: timedelta, lease: timedelta, *, reading_on: bool
    ) -> None:
        """Stale claims were taken over by the tick that started at `started`. The next pass
        comes after `takeover_period`, or, while the passes are `reading_on` through pages
        of stale claims they leave to others, after `READ_ON_PAUSE` at most."""
        period = takeover_period(claim_timeout, lease)
        self.next_reclaim = started + (min(period, READ_ON_PAUSE) if reading_on else period)

    def schedule_next(
        self, name: str, upcoming: datetime | None, store_now: datetime, started: float
    ) -> None:
        """Plan `name` again at `upcoming` (store time), counted from the tick's start;
        never again when it has no more windows."""
        if upcoming is None:
            self.due_at.remove(name)
            logger.info("safebeat: entry %r has no more windows", name)
            return
        self.due_at.set(name, started + max(0.0, (upcoming - store_now).total_seconds()))

    def sleep_time(
        self,
        now: float,
        *,
        heartbeat_at: float,
        runtime_look_at: float | None,
        broker_until: float | None,
        max_sleep: float,
    ) -> float:
        """Seconds until the first deadline, at most `max_sleep`. While the broker is backed
        off (`broker_until`), only its retry and the heartbeat can wake beat."""
        if broker_until is not None:
            deadlines = [broker_until, heartbeat_at]
        else:
            deadlines = [heartbeat_at, self.next_reclaim]
            earliest = self.due_at.earliest()
            if earliest is not None:
                deadlines.append(earliest)
            if runtime_look_at is not None:
                deadlines.append(runtime_look_at)
        return max(0.0, min(min(deadlines) - now, max_sleep))
