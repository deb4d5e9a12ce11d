"""Beat's tuning: the knobs of the tick engine, read afresh at every use.

`safebeat.Scheduler` inherits them, so a subclass (or an instance) sets them as it always
has; code that drives the engine without Celery passes a `Tuning` of its own.
"""

from __future__ import annotations

from safebeat.liveness import HEARTBEAT_INTERVAL


class Tuning:
    """The tick engine's knobs, as class attributes a subclass or an instance overrides."""

    #: Longest sleep between ticks: bounds how late a pause, a re-publish or a heartbeat is.
    max_interval = 5.0
    #: Seconds to wait before retrying when another replica holds the tick lock.
    busy_retry = 0.2
    #: Seconds between heartbeats of this replica.
    heartbeat_interval = HEARTBEAT_INTERVAL.total_seconds()
    #: Seconds between prunes of history older than `safebeat_retention`.
    prune_interval = 3600.0
    #: Most stale claims one tick takes over for re-publishing.
    reclaim_limit = 1000
    #: Most stale claims one take-over pass reads inside the tick's lock (a page, oldest
    #: first): the next pass reads the page after it, so the work under the lock stays the
    #: same however many claims went stale.
    reclaim_page = 4000
    #: Whether this scheduler runs the entries added at run time (`safebeat.schedules`).
    runs_runtime_entries = True
    #: Seconds between two looks at the version of the entries added at run time.
    runtime_interval = 1.0
    #: Most entries one tick claims; more due entries are taken by the next, immediate tick,
    #: so the time between a claim and its publish stays short however large the burst.
    #: A tick the store ends for outlasting safebeat_lock_timeout halves it, down to
    #: `min_claim_batch` (see `safebeat.beat.batching`).
    claim_batch = 5000
    #: Most due entries the first claim round of a tick takes, so publishing starts soon;
    #: each later round of the tick takes twice as many as the one before, up to
    #: `claim_batch`, and is claimed while the one before it is published.
    first_round = 500
    #: Publish each round on a thread of its own while the next is claimed (False: one
    #: after the other, on the thread that ticks).
    pipelined = True
    min_claim_batch = 10
    #: Seconds of each slice of the time between ticks spent building the message
    #: templates of the entries due next, so a burst only fills them in (0: never; see
    #: `safebeat.beat.prewarming`). Beat pauses as long between slices.
    prewarm_slice = 0.02
