-- safebeat schema, version 2: what the worker hook records about each execution of a
-- window, and effect keys (safebeat.claim). Instants and runtimes in microseconds.

ALTER TABLE safebeat_dispatch ADD COLUMN started_at INTEGER;
ALTER TABLE safebeat_dispatch ADD COLUMN finished_at INTEGER;
ALTER TABLE safebeat_dispatch ADD COLUMN outcome TEXT
    CHECK (outcome IN ('success', 'failure', 'retry'));
ALTER TABLE safebeat_dispatch ADD COLUMN runtime INTEGER;
ALTER TABLE safebeat_dispatch ADD COLUMN worker TEXT;
ALTER TABLE safebeat_dispatch ADD COLUMN retries INTEGER;
ALTER TABLE safebeat_dispatch ADD COLUMN runs INTEGER NOT NULL DEFAULT 0;
ALTER TABLE safebeat_dispatch ADD COLUMN duplicates INTEGER NOT NULL DEFAULT 0;

-- Executions that started and have not finished: what overlap="forbid" looks at.
CREATE INDEX safebeat_dispatch_running
    ON safebeat_dispatch (namespace, entry, started_at)
    WHERE started_at IS NOT NULL AND finished_at IS NULL;

CREATE TABLE safebeat_effect (
    namespace       TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    owner           TEXT    NOT NULL,
    task_id         TEXT,
    claimed_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    -- The effect key: recorded once, whoever inserts it first.
    PRIMARY KEY (namespace, key)
);

CREATE INDEX safebeat_effect_expires_at ON safebeat_effect (namespace, expires_at);
