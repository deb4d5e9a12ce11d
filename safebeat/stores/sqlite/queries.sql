-- Named queries of the SQLite store. Parameters are sqlite3's :name.

-- name: create_version_table
CREATE TABLE IF NOT EXISTS safebeat_schema_version (
    version     INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL,
    applied_at  INTEGER NOT NULL
);

-- name: schema_version
SELECT coalesce(max(version), 0) FROM safebeat_schema_version;

-- name: record_migration
INSERT INTO safebeat_schema_version (version, name, applied_at) VALUES (:version, :name, :now);

-- name: entry_facts
-- The facts of an entry `e`'s dispatch rows (safebeat.facts), joined by load_states and
-- all_states; the stores decide nothing from them.
-- The newest run holding a live lease: the newest start of safebeat_dispatch_running,
-- whose condition this WHERE repeats, then its row by id.
LEFT JOIN safebeat_dispatch AS r ON r.id = (
    SELECT d.id FROM safebeat_dispatch AS d
    WHERE d.namespace = e.namespace AND d.entry = e.name
      AND d.started_at IS NOT NULL AND d.finished_at IS NULL
      AND d.lease_until > :now
    ORDER BY d.started_at DESC LIMIT 1)
-- The newest dispatched window: one probe of safebeat_dispatch_dispatched, whose
-- condition this WHERE repeats, past any number of newer skipped or failed rows.
LEFT JOIN safebeat_dispatch AS q ON q.id = (
    SELECT d.id FROM safebeat_dispatch AS d
    WHERE d.namespace = e.namespace AND d.entry = e.name
      AND d.status IN ('claimed', 'sent')
    ORDER BY d.window_at DESC LIMIT 1)

-- name: load_states
-- The entry's values, then the facts of its dispatch rows (safebeat.facts; the stores
-- decide nothing from them): its newest run holding a live lease, and its newest
-- dispatched window (STATE_COLUMNS in safebeat.stores.decoding).
SELECT e.name, e.anchor, e.defined_at, e.last_window, e.digest, e.schedule,
       e.paused, e.paused_until, e.pause_note,
       r.window_at, r.started_at, r.lease_until, r.task_id,
       q.window_at, q.claimed_at, q.started_at
FROM safebeat_entry AS e
-- include: entry_facts
WHERE e.namespace = :namespace AND e.name IN (SELECT value FROM json_each(:names));

-- name: all_states
SELECT e.name, e.anchor, e.defined_at, e.last_window, e.digest, e.schedule,
       e.paused, e.paused_until, e.pause_note,
       r.window_at, r.started_at, r.lease_until, r.task_id,
       q.window_at, q.claimed_at, q.started_at
FROM safebeat_entry AS e
-- include: entry_facts
WHERE e.namespace = :namespace;

-- name: registered_digests
SELECT name, digest FROM safebeat_entry
WHERE namespace = :namespace AND name IN (SELECT value FROM json_each(:names));

-- name: register
INSERT INTO safebeat_entry
    (namespace, name, schedule, digest, anchor, defined_at, registered_by)
VALUES (:namespace, :name, :schedule, :digest, :anchor, :now, :replica)
ON CONFLICT (namespace, name) DO UPDATE
    SET schedule = excluded.schedule,
        digest = excluded.digest,
        defined_at = CASE WHEN safebeat_entry.schedule <> excluded.schedule
                          THEN excluded.defined_at ELSE safebeat_entry.defined_at END,
        registered_by = excluded.registered_by
    WHERE safebeat_entry.digest <> excluded.digest;

-- name: insert_dispatch
-- The fence (safebeat.record_rules.fenced), on a tick's rows (:fenced): a window at or before
-- the entry's last window as stored when the row is written was decided by some replica
-- after this plan was made, and is neither claimed nor recorded as skipped.
-- write_windows (trigger, backfill) writes past windows on purpose: not fenced.
INSERT INTO safebeat_dispatch
    (namespace, entry, window_at, status, task_id, task_name, reason,
     skipped_from, skipped_count, replica, host, pid, claimed_at)
SELECT :namespace, :entry, :window, :status, :task_id, :task_name, :reason,
       :skipped_from, :skipped_count, :replica, :host, :pid, :now
WHERE NOT :fenced OR NOT EXISTS (
    SELECT 1 FROM safebeat_entry
    WHERE namespace = :namespace AND name = :entry AND last_window >= :window
)
ON CONFLICT (namespace, entry, window_at) DO NOTHING
RETURNING id;

-- name: advance_state
UPDATE safebeat_entry
SET last_window = max(coalesce(last_window, :window), :window)
WHERE namespace = :namespace AND name = :name;

-- name: stale_claims
-- A page of the claims left unsent past the timeout, and runs whose lease expired without
-- a finish (see the PostgreSQL store's stale_claims), of every entry: at most :page, the
-- first after (:after_at, :after_id) in the order (claimed_at, id). The unsent ones come
-- through the index of unsent claims, which holds the rowid, so it is in that order: the
-- scan starts at the place and stops after :page rows, however many claims went stale.
-- The dead runs come through the index of running rows. Both are named (INDEXED BY):
-- without statistics SQLite would rather walk the index of every row by claim time, sent
-- ones too. Beat keeps those of the entries it defines.
SELECT id, entry, window_at, task_id, attempts + 1, claimed_at FROM (
    SELECT id, entry, window_at, task_id, attempts, claimed_at
    FROM safebeat_dispatch INDEXED BY safebeat_dispatch_unsent
    WHERE namespace = :namespace AND status = 'claimed' AND claimed_at < :stale_before
      AND claimed_at >= :after_at AND (claimed_at > :after_at OR id > :after_id)
      AND task_id IS NOT NULL
      AND NOT coalesce(started_at IS NOT NULL AND finished_at IS NULL AND lease_until > :now, 0)
    ORDER BY claimed_at, id
    LIMIT :page
)
UNION
SELECT id, entry, window_at, task_id, attempts + 1, claimed_at FROM (
    SELECT id, entry, window_at, task_id, attempts, claimed_at
    FROM safebeat_dispatch INDEXED BY safebeat_dispatch_running
    WHERE namespace = :namespace AND started_at IS NOT NULL AND finished_at IS NULL
      AND lease_until <= :now AND task_id IS NOT NULL
      AND claimed_at >= :after_at AND (claimed_at > :after_at OR id > :after_id)
    ORDER BY claimed_at, id
    LIMIT :page
)
ORDER BY claimed_at, id
LIMIT :page;

-- name: reclaim
UPDATE safebeat_dispatch
SET claimed_at = :now, attempts = attempts + 1, status = 'claimed', lease_until = NULL,
    replica = :replica, host = :host, pid = :pid
WHERE id = :id;

-- name: mark_sent
UPDATE safebeat_dispatch SET status = 'sent', sent_at = :now
WHERE id = :id AND status = 'claimed';

-- name: mark_failed
UPDATE safebeat_dispatch SET status = 'failed', error = :error
WHERE id = :id AND status = 'claimed';

-- name: release_claim
-- A claim this replica never handed to the transport, handed back: made stale for the
-- take-over rule (stale_claims) at once. Only while it is still this replica's unsent
-- claim of that attempt: one taken over or recorded since is left alone.
UPDATE safebeat_dispatch SET claimed_at = :claimed_at
WHERE id = :id AND status = 'claimed' AND replica = :replica AND attempts = :attempts;

-- name: heartbeat
INSERT INTO safebeat_replica
    (namespace, replica, host, pid, version, started_at, heartbeat_at, definitions)
VALUES (:namespace, :replica, :host, :pid, :version, :now, :now, :definitions)
ON CONFLICT (namespace, replica) DO UPDATE
    SET heartbeat_at = excluded.heartbeat_at,
        version = excluded.version,
        definitions = excluded.definitions;

-- name: alive
-- A heartbeat whose definitions did not change: the row keeps them; no row, no update
-- (the replica then sends them in full).
UPDATE safebeat_replica SET heartbeat_at = :now
WHERE namespace = :namespace AND replica = :replica;

-- name: patch_definitions
-- A heartbeat with the digests that changed: the row's definitions take the JSON merge
-- patch (a digest each, null for a removed entry); no row, no update (the replica then
-- sends them in full).
UPDATE safebeat_replica
SET heartbeat_at = :now, version = :version, definitions = json_patch(definitions, :patch)
WHERE namespace = :namespace AND replica = :replica;

-- name: replicas
SELECT replica, host, pid, version, started_at, heartbeat_at, definitions
FROM safebeat_replica
WHERE namespace = :namespace
ORDER BY heartbeat_at DESC;

-- name: heartbeats
SELECT heartbeat_at FROM safebeat_replica WHERE namespace = :namespace
ORDER BY heartbeat_at DESC;

-- name: history
SELECT id, entry, window_at, status, task_id, task_name, reason, skipped_from,
       skipped_count, replica, host, pid, claimed_at, sent_at, attempts, error,
       started_at, finished_at, outcome, runtime, worker, retries, runs, duplicates,
       lease_until
FROM safebeat_dispatch
WHERE namespace = :namespace AND (:entry IS NULL OR entry = :entry)
ORDER BY window_at DESC, id DESC
LIMIT :limit;

-- name: prune_dispatches
-- One batch of the rows claimed before :before, oldest first; prune runs batch after
-- batch, each a write transaction of its own, so a tick never waits long behind it.
DELETE FROM safebeat_dispatch
WHERE id IN (
    SELECT id FROM safebeat_dispatch
    WHERE namespace = :namespace AND claimed_at < :before
    ORDER BY claimed_at
    LIMIT :batch
);

-- name: prune_replicas
DELETE FROM safebeat_replica WHERE namespace = :namespace AND heartbeat_at < :before;

-- name: forget_replica
DELETE FROM safebeat_replica WHERE namespace = :namespace AND replica = :replica;

-- name: namespaces
SELECT DISTINCT namespace FROM safebeat_entry ORDER BY namespace;

-- name: execution_of
-- other_run_alive: another window of the entry runs with a live lease (for `forbid`).
SELECT id, started_at, finished_at, outcome, lease_until, retries,
       :exclusive AND EXISTS (
           SELECT 1 FROM safebeat_dispatch AS o
           WHERE o.namespace = :namespace AND o.entry = :entry AND o.window_at <> :window
             AND o.started_at IS NOT NULL AND o.finished_at IS NULL
             AND o.lease_until > :now)
FROM safebeat_dispatch
WHERE namespace = :namespace AND entry = :entry AND window_at = :window
  AND task_id IS NOT NULL;

-- name: start_execution
UPDATE safebeat_dispatch
SET started_at = :now, lease_until = :lease_until, worker = :worker, retries = :retries,
    finished_at = NULL, outcome = NULL, runtime = NULL, runs = runs + 1
WHERE id = :id;

-- name: renew_execution
UPDATE safebeat_dispatch SET lease_until = :lease_until
WHERE namespace = :namespace AND entry = :entry AND window_at = :window
  AND worker = :worker AND retries = :retries AND finished_at IS NULL;

-- name: count_duplicate
UPDATE safebeat_dispatch SET duplicates = duplicates + 1 WHERE id = :id;

-- name: finish_execution
UPDATE safebeat_dispatch
SET finished_at = :now, outcome = :outcome, runtime = :runtime,
    error = coalesce(:detail, error)
WHERE namespace = :namespace AND entry = :entry AND window_at = :window
  AND worker = :worker AND retries = :retries AND finished_at IS NULL;

-- name: claim_effect
-- The effect key: a new key is inserted; an expired one is taken over; a live one wins.
INSERT INTO safebeat_effect (namespace, key, owner, task_id, claimed_at, expires_at)
VALUES (:namespace, :key, :owner, :task_id, :now, :expires_at)
ON CONFLICT (namespace, key) DO UPDATE
    SET owner = excluded.owner,
        task_id = excluded.task_id,
        claimed_at = excluded.claimed_at,
        expires_at = excluded.expires_at
    WHERE safebeat_effect.expires_at <= excluded.claimed_at
RETURNING 1;

-- name: release_effect
DELETE FROM safebeat_effect WHERE namespace = :namespace AND key = :key AND owner = :owner;

-- name: prune_effects
DELETE FROM safebeat_effect WHERE namespace = :namespace AND expires_at <= :now;

-- name: set_paused
-- Resuming clears the end and the note too.
UPDATE safebeat_entry
SET paused = :paused, paused_until = :until, pause_note = :note
WHERE namespace = :namespace AND name = :name;

-- name: forget_entry
-- An entry no code defines any more; its dispatch rows stay, so its windows stay decided.
DELETE FROM safebeat_entry WHERE namespace = :namespace AND name = :name;

-- name: record_audit
INSERT INTO safebeat_audit (namespace, at, actor, action, entry, windows, note)
VALUES (:namespace, :now, :actor, :action, :entry, :windows, :note)
RETURNING id, at;

-- name: audit
SELECT id, at, actor, action, entry, windows, note
FROM safebeat_audit
WHERE namespace = :namespace AND (:entry IS NULL OR entry = :entry)
ORDER BY id DESC
LIMIT :limit;

-- name: prune_audit
DELETE FROM safebeat_audit WHERE namespace = :namespace AND at < :before;

-- name: add_runtime_entry
INSERT INTO safebeat_runtime_entry (namespace, name, spec, updated_at)
VALUES (:namespace, :name, :spec, :now)
ON CONFLICT (namespace, name) DO NOTHING;

-- name: replace_runtime_entry
UPDATE safebeat_runtime_entry SET spec = :spec, updated_at = :now
WHERE namespace = :namespace AND name = :name;

-- name: delete_runtime_entry
DELETE FROM safebeat_runtime_entry WHERE namespace = :namespace AND name = :name;

-- name: bump_runtime_version
-- In the transaction of the change: a replica that reads the new version sees the change.
INSERT INTO safebeat_counter (namespace, name, value) VALUES (:namespace, 'runtime_entries', 1)
ON CONFLICT (namespace, name) DO UPDATE SET value = safebeat_counter.value + 1;

-- name: runtime_entries
SELECT name, spec FROM safebeat_runtime_entry WHERE namespace = :namespace ORDER BY name;

-- name: runtime_version
SELECT coalesce(max(value), 0) FROM safebeat_counter
WHERE namespace = :namespace AND name = 'runtime_entries';
