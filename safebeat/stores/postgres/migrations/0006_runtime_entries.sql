-- safebeat schema, version 6: entries added at run time (safebeat.schedules, safebeat schedule).

CREATE TABLE safebeat_runtime_entry (
    namespace   text        NOT NULL,
    name        text        NOT NULL,
    -- The entry's definition as JSON (task, schedule, args, kwargs, options).
    spec        text        NOT NULL,
    updated_at  timestamptz NOT NULL,
    CONSTRAINT safebeat_runtime_entry_key PRIMARY KEY (namespace, name)
);

-- One counter per namespace, moved by every change above: replicas read it each look
-- instead of loading every definition.
CREATE TABLE safebeat_runtime_version (
    namespace   text    NOT NULL,
    version     bigint  NOT NULL,
    CONSTRAINT safebeat_runtime_version_key PRIMARY KEY (namespace)
);
