-- safebeat schema, version 5: pauses with an end and a note, and the audit trail of
-- every operator action (pause, resume, trigger, backfill, prune, migrate).

ALTER TABLE safebeat_entry ADD COLUMN paused_until timestamptz;
ALTER TABLE safebeat_entry ADD COLUMN pause_note text;

CREATE TABLE safebeat_audit (
    id          bigserial   PRIMARY KEY,
    namespace   text        NOT NULL,
    at          timestamptz NOT NULL,
    actor       text        NOT NULL,
    action      text        NOT NULL,
    entry       text,
    windows     jsonb       NOT NULL,
    note        text
);

CREATE INDEX safebeat_audit_at ON safebeat_audit (namespace, at);
