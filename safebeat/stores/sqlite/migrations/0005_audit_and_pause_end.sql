-- safebeat schema, version 5: pauses with an end and a note, and the audit trail of
-- every operator action (pause, resume, trigger, backfill, prune, migrate).

ALTER TABLE safebeat_entry ADD COLUMN paused_until INTEGER;
ALTER TABLE safebeat_entry ADD COLUMN pause_note TEXT;

CREATE TABLE safebeat_audit (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace   TEXT    NOT NULL,
    at          INTEGER NOT NULL,
    actor       TEXT    NOT NULL,
    action      TEXT    NOT NULL,
    entry       TEXT,
    windows     TEXT    NOT NULL,
    note        TEXT
);

CREATE INDEX safebeat_audit_at ON safebeat_audit (namespace, at);
