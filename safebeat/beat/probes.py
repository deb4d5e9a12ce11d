"""What a beat replica's probes answer: live while its tick loop runs, ready while the store
answers it.

Liveness never depends on the store: a store outage is something beat rides out (it claims
nothing and retries), and restarting it then only wipes its metrics and, once the restarts
pile up, delays its recovery by Kubernetes' back-off. Readiness is the store's part: a replica
is ready while its heartbeat is recent (the rule `safebeat status` applies,
`safebeat.liveness.LIVE_WITHIN`) and its last store call did not fail.

Everything is read on one monotonic clock, so a wall-clock step changes no answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from safebeat.liveness import LIVE_WITHIN

#: The longest one store call may block the tick loop: PostgreSQL's statement timeout of
#: the calls outside the tick (registering, pruning).
LONGEST_STORE_CALL = 60.0
#: Loop passes (a tick and its sleep, each at most `max_interval`) a live loop may miss.
SLACK_INTERVALS = 6
#: Seconds per entry that a tick which registers every entry again may take beyond that
#: (on PostgreSQL, 1,000,000 entries take about 100 s; docs/performance.md).
SECONDS_PER_ENTRY = 0.00025


def default_liveness_timeout(max_interval: float, entries: int = 0) -> float:
    """Seconds the tick loop may go without a tick before beat answers /livez with 503.

    One pass is a tick (claim rounds for at most `max_interval`, store calls of at most
    `LONGEST_STORE_CALL`) and a sleep of at most `max_interval`; a tick that registers the
    entries again (they changed at run time) grows with their number. 90 s at the default
    5 s and a few thousand entries, 115 s at 100,000.
    """
    return LONGEST_STORE_CALL + SLACK_INTERVALS * max_interval + SECONDS_PER_ENTRY * entries


@dataclass(frozen=True)
class ProbeAnswer:
    """One probe's answer: `ok` is HTTP 200 (else 503), `reason` its one-line body."""

    ok: bool
    reason: str


class ProbeState:
    """What the tick loop last did, recorded as it happens and read by the probe server's
    threads. Each record is one attribute written whole, so no lock is needed."""

    def __init__(
        self,
        *,
        monotonic: Callable[[], float],
        liveness_timeout: float,
        ready_within: timedelta = LIVE_WITHIN,
    ) -> None:
        self._monotonic = monotonic
        #: Seconds; a scheduler sets it once Celery has given it its max interval.
        self.liveness_timeout = liveness_timeout
        self.ready_within = ready_within.total_seconds()
        self._last_pass: float | None = None
        self._last_heartbeat: float | None = None
        self._store_failing_since: float | None = None

    # --- records, from the tick loop ------------------------------------------------------

    def loop_ran(self) -> None:
        """The tick loop finished a tick (whatever the store answered)."""
        self._last_pass = self._monotonic()

    def heartbeat_recorded(self) -> None:
        """The store took this replica's heartbeat."""
        self._last_heartbeat = self._monotonic()

    def store_failed(self) -> None:
        """A store call failed (unreachable or an error)."""
        if self._store_failing_since is None:
            self._store_failing_since = self._monotonic()

    def store_answered(self) -> None:
        """A step of the tick loop ended without a store failure."""
        self._store_failing_since = None

    # --- answers, for the probe server ----------------------------------------------------

    def liveness(self) -> ProbeAnswer:
        """Live while the tick loop finished a tick within `liveness_timeout`."""
        if self._last_pass is None:
            return ProbeAnswer(False, "starting: no tick yet")
        ago = self._monotonic() - self._last_pass
        if ago > self.liveness_timeout:
            return ProbeAnswer(
                False,
                f"stalled: last tick {ago:.0f}s ago (more than {self.liveness_timeout:g}s)",
            )
        return ProbeAnswer(True, f"ok: last tick {ago:.1f}s ago")

    def readiness(self) -> ProbeAnswer:
        """Ready while live, the last store call succeeded and the last heartbeat is recent."""
        live = self.liveness()
        if not live.ok:
            return live
        now = self._monotonic()
        if self._store_failing_since is not None:
            since = now - self._store_failing_since
            return ProbeAnswer(False, f"store failing for {since:.0f}s")
        if self._last_heartbeat is None:
            return ProbeAnswer(False, "no heartbeat recorded yet")
        ago = now - self._last_heartbeat
        if ago > self.ready_within:
            return ProbeAnswer(
                False, f"last heartbeat {ago:.0f}s ago (more than {self.ready_within:g}s)"
            )
        return ProbeAnswer(True, f"ok: heartbeat {ago:.1f}s ago")
