-- safebeat schema, version 2: what the worker hook records about each execution of a
-- window, and effect keys (safebeat.claim).

ALTER TABLE safebeat_dispatch
    ADD COLUMN started_at   timestamptz,
    ADD COLUMN finished_at  timestamptz,
    ADD COLUMN outcome      text CHECK (outcome IN ('success', 'failure', 'retry')),
    ADD COLUMN runtime      interval,
    ADD COLUMN worker       text,
    ADD COLUMN retries      integer,
    ADD COLUMN runs         integer NOT NULL DEFAULT 0,
    ADD COLUMN duplicates   integer NOT NULL DEFAULT 0;

-- Executions that started and have not finished: what overlap="forbid" looks at.
CREATE INDEX safebeat_dispatch_running
    ON safebeat_dispatch (namespace, entry, started_at)
    WHERE started_at IS NOT NULL AND finished_at IS NULL;

CREATE TABLE safebeat_effect (
    namespace       text        NOT NULL,
    key             text        NOT NULL,
    owner           text        NOT NULL,
    task_id         text,
    claimed_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    -- The effect key: recorded once, whoever inserts it first.
    CONSTRAINT safebeat_effect_key PRIMARY KEY (namespace, key)
);

CREATE INDEX safebeat_effect_expires_at ON safebeat_effect (namespace, expires_at);
