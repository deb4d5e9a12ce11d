-- safebeat schema, version 1: entries, dispatches (the claims) and replicas.

CREATE TABLE safebeat_entry (
    namespace       text        NOT NULL,
    name            text        NOT NULL,
    schedule        text        NOT NULL,
    digest          text        NOT NULL,
    anchor          timestamptz NOT NULL,
    defined_at      timestamptz NOT NULL,
    last_window     timestamptz,
    registered_by   text        NOT NULL,
    PRIMARY KEY (namespace, name)
);

CREATE TABLE safebeat_dispatch (
    id              bigserial   PRIMARY KEY,
    namespace       text        NOT NULL,
    entry           text        NOT NULL,
    window_at       timestamptz NOT NULL,
    status          text        NOT NULL
                    CHECK (status IN ('claimed', 'sent', 'failed', 'skipped')),
    task_id         text,
    task_name       text,
    reason          text,
    skipped_from    timestamptz,
    skipped_count   integer,
    replica         text        NOT NULL,
    host            text        NOT NULL,
    pid             integer     NOT NULL,
    claimed_at      timestamptz NOT NULL,
    sent_at         timestamptz,
    attempts        integer     NOT NULL DEFAULT 1,
    error           text,
    -- The dispatch marker: one row per window, whoever inserts it first.
    CONSTRAINT safebeat_dispatch_window UNIQUE (namespace, entry, window_at)
);

CREATE INDEX safebeat_dispatch_unsent
    ON safebeat_dispatch (namespace, claimed_at) WHERE status = 'claimed';
CREATE INDEX safebeat_dispatch_claimed_at ON safebeat_dispatch (namespace, claimed_at);

CREATE TABLE safebeat_replica (
    namespace       text        NOT NULL,
    replica         text        NOT NULL,
    host            text        NOT NULL,
    pid             integer     NOT NULL,
    version         text        NOT NULL,
    started_at      timestamptz NOT NULL,
    heartbeat_at    timestamptz NOT NULL,
    definitions     jsonb       NOT NULL,
    PRIMARY KEY (namespace, replica)
);
