"""When a replica counts as live: the one rule of `safebeat status`, `doctor` and the admin.

Beat heartbeats every `HEARTBEAT_INTERVAL`; a replica that missed three heartbeats in a
row is shown as dead. A replica that stopped cleanly removed its heartbeat on the way out
(`Store.forget_replica`), so it is not shown at all.
"""

from __future__ import annotations

from datetime import datetime, timedelta

#: How often each beat replica records its heartbeat.
HEARTBEAT_INTERVAL = timedelta(seconds=10)
#: A replica whose last heartbeat is older than this is dead (three missed heartbeats).
LIVE_WITHIN = 3 * HEARTBEAT_INTERVAL


def is_live(heartbeat_at: datetime, now: datetime) -> bool:
    """Whether a replica that last heartbeated at `heartbeat_at` is live at `now` (store clock)."""
    return now - heartbeat_at <= LIVE_WITHIN
