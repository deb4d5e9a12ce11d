-- safebeat schema, version 7: an entry's newest dispatched (claimed or sent) window in one
-- index probe. A tick reads it for every due entry (queued_since), under the tick lock;
-- through the unique key it walked back over every skipped or failed row since, which a
-- paused, `forbid` or calendar-excluded entry adds one of per window, forever.
-- Built on the live table: claims wait while it is built (on PostgreSQL about two
-- seconds per million dispatch rows; docs/upgrading.md).

CREATE INDEX safebeat_dispatch_dispatched
    ON safebeat_dispatch (namespace, entry, window_at)
    WHERE status IN ('claimed', 'sent');
