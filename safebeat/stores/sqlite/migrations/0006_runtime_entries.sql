-- safebeat schema, version 6: entries added at run time (safebeat.schedules, safebeat schedule).

CREATE TABLE safebeat_runtime_entry (
    namespace   TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    spec        TEXT    NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
);

CREATE TABLE safebeat_counter (
    namespace   TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    value       INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
);
