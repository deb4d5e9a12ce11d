-- safebeat schema, version 3: entries paused for every replica (safebeat pause / resume).

ALTER TABLE safebeat_entry ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
