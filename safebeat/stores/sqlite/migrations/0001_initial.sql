-- safebeat schema, version 1: entries, dispatches (the claims) and replicas.
-- Instants are integer microseconds since the Unix epoch (UTC).

CREATE TABLE safebeat_entry (
    namespace       TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    schedule        TEXT    NOT NULL,
    digest          TEXT    NOT NULL,
    anchor          INTEGER NOT NULL,
    defined_at      INTEGER NOT NULL,
    last_window     INTEGER,
    registered_by   TEXT    NOT NULL,
    PRIMARY KEY (namespace, name)
);

CREATE TABLE safebeat_dispatch (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace       TEXT    NOT NULL,
    entry           TEXT    NOT NULL,
    window_at       INTEGER NOT NULL,
    status          TEXT    NOT NULL
                    CHECK (status IN ('claimed', 'sent', 'failed', 'skipped')),
    task_id         TEXT,
    task_name       TEXT,
    reason          TEXT,
    skipped_from    INTEGER,
    skipped_count   INTEGER,
    replica         TEXT    NOT NULL,
    host            TEXT    NOT NULL,
    pid             INTEGER NOT NULL,
    claimed_at      INTEGER NOT NULL,
    sent_at         INTEGER,
    attempts        INTEGER NOT NULL DEFAULT 1,
    error           TEXT,
    -- The dispatch marker: one row per window, whoever inserts it first.
    CONSTRAINT safebeat_dispatch_window UNIQUE (namespace, entry, window_at)
);

CREATE INDEX safebeat_dispatch_unsent
    ON safebeat_dispatch (namespace, claimed_at) WHERE status = 'claimed';
CREATE INDEX safebeat_dispatch_claimed_at ON safebeat_dispatch (namespace, claimed_at);

CREATE TABLE safebeat_replica (
    namespace       TEXT    NOT NULL,
    replica         TEXT    NOT NULL,
    host            TEXT    NOT NULL,
    pid             INTEGER NOT NULL,
    version         TEXT    NOT NULL,
    started_at      INTEGER NOT NULL,
    heartbeat_at    INTEGER NOT NULL,
    definitions     TEXT    NOT NULL,
    PRIMARY KEY (namespace, replica)
);
