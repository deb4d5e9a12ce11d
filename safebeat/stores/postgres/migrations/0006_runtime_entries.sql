-- safebeat schema, version 6: entries added at run time (safebeat.schedules, safebeat schedule).

CREATE TABLE safebeat_runtime_entry (
    namespace   text        NOT NULL,
    name        text        NOT NULL,
    -- The entry's definition as JSON (task, schedule, args, kwargs, options).
    spec        text        NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (namespace, name)
);

-- Counters per namespace; `runtime_entries` moves with every change above, so replicas
-- read one row each look instead of loading every definition.
CREATE TABLE safebeat_counter (
    namespace   text    NOT NULL,
    name        text    NOT NULL,
    value       bigint  NOT NULL,
    PRIMARY KEY (namespace, name)
);
