-- Named queries of the PostgreSQL store. Parameters are psycopg's %(name)s.

-- name: create_version_table
CREATE TABLE IF NOT EXISTS safebeat_schema_version (
    version     integer     PRIMARY KEY,
    name        text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- name: lock_migrations
SELECT pg_advisory_xact_lock(%(key)s)

-- name: schema_version
SELECT coalesce(max(version), 0) FROM safebeat_schema_version;

-- name: record_migration
INSERT INTO safebeat_schema_version (version, name) VALUES (%(version)s, %(name)s);

-- name: forget_migration
-- Django's `migrate safebeat <earlier>` undid this version's tables.
DELETE FROM safebeat_schema_version WHERE version = %(version)s;

-- name: drop_version_table_if_empty
-- Django's `migrate safebeat zero` leaves no safebeat table behind, this one included.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM safebeat_schema_version) THEN
        DROP TABLE safebeat_schema_version;
    END IF;
END
$$;

-- name: clock
SELECT clock_timestamp();

-- name: bound_transaction
-- Sent with BEGIN, try_tick_lock and load_states as one message (one round trip). The
-- idle-in-transaction timeout ends the session of a replica frozen while it holds the
-- lock, which releases the transaction-scoped advisory lock. No JIT: a claim round's
-- load_states (5,000 index probes) is rated above jit_above_cost, and compiling it took
-- longer (about 50 ms) than running it.
SELECT set_config('idle_in_transaction_session_timeout', %(idle)s, true),
       set_config('lock_timeout', %(lock)s, true),
       set_config('statement_timeout', %(statement)s, true),
       set_config('jit', 'off', true);

-- name: try_tick_lock
SELECT pg_try_advisory_xact_lock(%(key)s), clock_timestamp();

-- name: entry_facts
-- The facts of an entry `e`'s dispatch rows (safebeat.facts), joined by load_states and
-- all_states; the stores decide nothing from them.
-- The newest run holding a live lease: the newest start of safebeat_dispatch_running,
-- whose condition this WHERE repeats.
LEFT JOIN LATERAL (
    SELECT d.window_at, d.started_at, d.lease_until, d.task_id
    FROM safebeat_dispatch AS d
    WHERE d.namespace = e.namespace AND d.entry = e.name
      AND d.started_at IS NOT NULL AND d.finished_at IS NULL
      AND d.lease_until > clock_timestamp()
    ORDER BY d.started_at DESC LIMIT 1
) AS r ON true
-- The newest dispatched window: one probe of safebeat_dispatch_dispatched, whose
-- condition this WHERE repeats, past any number of newer skipped or failed rows.
LEFT JOIN LATERAL (
    SELECT q.window_at, q.claimed_at, q.started_at
    FROM safebeat_dispatch AS q
    WHERE q.namespace = e.namespace AND q.entry = e.name
      AND q.status IN ('claimed', 'sent')
    ORDER BY q.window_at DESC LIMIT 1
) AS q ON true

-- name: load_states
-- The entry's values, then the facts of its dispatch rows (safebeat.facts; the stores
-- decide nothing from them): its newest run holding a live lease, and its newest
-- dispatched window (STATE_COLUMNS in safebeat.stores.decoding).
SELECT e.name, e.anchor, e.defined_at, e.last_window, e.digest, e.schedule,
       e.paused, e.paused_until, e.pause_note,
       r.window_at, r.started_at, r.lease_until, r.task_id,
       q.window_at, q.claimed_at, q.started_at
-- One primary-key probe per name. With `name = ANY(...)` of thousands of names (a claim
-- round asks for up to 5,000) the planner scans the whole namespace instead, rating that
-- cheaper than as many probes: at 1,000,000 entries each round read all of them. The
-- LIMIT keeps the subquery from being merged into a join the planner could turn into
-- that scan again; the key is unique, so it drops nothing.
FROM unnest(%(names)s::text[]) AS n(name)
CROSS JOIN LATERAL (
    SELECT * FROM safebeat_entry AS e
    WHERE e.namespace = %(namespace)s AND e.name = n.name
    LIMIT 1
) AS e
-- include: entry_facts
;

-- name: all_states
SELECT e.name, e.anchor, e.defined_at, e.last_window, e.digest, e.schedule,
       e.paused, e.paused_until, e.pause_note,
       r.window_at, r.started_at, r.lease_until, r.task_id,
       q.window_at, q.claimed_at, q.started_at
FROM safebeat_entry AS e
-- include: entry_facts
WHERE e.namespace = %(namespace)s;

-- name: registered_digests
-- One primary-key probe per name, as in load_states: with `name = ANY(...)` a restart of
-- 1,000,000 entries read the whole namespace once per slice of 5,000, 200 times.
SELECT e.name, e.digest
FROM unnest(%(names)s::text[]) AS n(name)
CROSS JOIN LATERAL (
    SELECT name, digest FROM safebeat_entry AS e
    WHERE e.namespace = %(namespace)s AND e.name = n.name
    LIMIT 1
) AS e;

-- name: insert_entries
-- The entries the slice's read found missing or changed (a changed one, sent after
-- update_entries, is inserted only if it was deleted since). Nothing else in the
-- statement: joining the slice to the namespace (to skip the names it holds) hashed the
-- whole namespace once per slice, so a first registration of 1,000,000 entries grew with
-- the square of it. A name another replica inserted since the read keeps that row.
INSERT INTO safebeat_entry
    (namespace, name, schedule, digest, anchor, defined_at, registered_by)
SELECT %(namespace)s, d.name, d.schedule, d.digest,
       date_trunc('second', %(now)s::timestamptz), %(now)s, %(replica)s
FROM unnest(%(names)s::text[], %(schedules)s::text[], %(digests)s::text[])
     AS d(name, schedule, digest)
ON CONFLICT (namespace, name) DO NOTHING;

-- name: update_entries
-- The entries the slice's read found with another digest. An entry whose digest is
-- unchanged (now) is neither written nor locked (ON CONFLICT DO UPDATE would lock it even
-- when its WHERE is false), so a replica frozen inside register holds up no other
-- replica's tick.
UPDATE safebeat_entry AS e
SET schedule = d.schedule,
    digest = d.digest,
    defined_at = CASE WHEN e.schedule <> d.schedule
                      THEN %(now)s::timestamptz ELSE e.defined_at END,
    registered_by = %(replica)s
FROM unnest(%(names)s::text[], %(schedules)s::text[], %(digests)s::text[])
     AS d(name, schedule, digest)
WHERE e.namespace = %(namespace)s AND e.name = d.name AND e.digest <> d.digest;

-- name: insert_dispatches
-- The claims: a row per window under the unique key; an existing row wins silently.
-- This, advance_states and stale_claims end a tick, sent with COMMIT in one message.
-- The fence (safebeat.record_rules.fenced), on a tick's rows (`fenced`): a window at or
-- before the entry's last window as stored now, when the row is written, was decided by
-- some replica after this plan was made, and is neither claimed nor recorded as skipped.
-- write_windows (trigger, backfill) writes past windows on purpose: not fenced.
INSERT INTO safebeat_dispatch
    (namespace, entry, window_at, status, task_id, task_name, reason,
     skipped_from, skipped_count, replica, host, pid, claimed_at)
SELECT %(namespace)s, d.entry, d.window_at, d.status, d.task_id, d.task_name, d.reason,
       d.skipped_from, d.skipped_count, %(replica)s, %(host)s, %(pid)s, %(now)s
FROM unnest(%(entries)s::text[], %(windows)s::timestamptz[], %(statuses)s::text[],
            %(task_ids)s::text[], %(task_names)s::text[], %(reasons)s::text[],
            %(skipped_from)s::timestamptz[], %(skipped_counts)s::integer[])
     AS d(entry, window_at, status, task_id, task_name, reason, skipped_from, skipped_count)
WHERE NOT %(fenced)s OR NOT EXISTS (
    SELECT 1 FROM safebeat_entry AS e
    WHERE e.namespace = %(namespace)s AND e.name = d.entry AND e.last_window >= d.window_at
)
ON CONFLICT ON CONSTRAINT safebeat_dispatch_window DO NOTHING
RETURNING id, entry, window_at, task_id, status;

-- name: advance_states
UPDATE safebeat_entry AS e
SET last_window = greatest(e.last_window, u.last_window)
FROM unnest(%(advance_names)s::text[], %(advance_windows)s::timestamptz[])
     AS u(name, last_window)
WHERE e.namespace = %(namespace)s AND e.name = u.name;

-- name: stale_claims
-- A page of the claims left unsent past the timeout, and of the runs whose lease expired
-- without a finish (their worker died, and no broker may deliver them again), of every
-- entry: at most `page` of them, the first after (`after_at`, `after_id`) in the order
-- (claimed_at, id). The unsent ones come through the partial index of unsent claims, by
-- claim time from that place on: first the claim time of the page's last row (a scan in
-- the index's own order that stops after a page), then the rows up to it, sorted. So
-- whatever plan is chosen, a page reads a page, plus the rows claimed at the same
-- instant as its first or last row (one tick's claims); the dead runs come through the
-- partial index of running rows. Never what the stale claims or the entries cost. Beat
-- keeps those of the entries it defines (a claim of another replica's entry stays for
-- it) and takes them over (take_over).
SELECT id, entry, claimed_at FROM (
    (SELECT id, entry, claimed_at FROM safebeat_dispatch
     WHERE namespace = %(namespace)s AND status = 'claimed' AND task_id IS NOT NULL
       AND claimed_at < %(stale_before)s AND claimed_at >= %(after_at)s
       AND (claimed_at > %(after_at)s OR id > %(after_id)s)
       AND NOT coalesce(started_at IS NOT NULL AND finished_at IS NULL AND lease_until > %(now)s, false)
       AND claimed_at <= coalesce(
           (SELECT claimed_at FROM safebeat_dispatch
            WHERE namespace = %(namespace)s AND status = 'claimed' AND task_id IS NOT NULL
              AND claimed_at < %(stale_before)s AND claimed_at >= %(after_at)s
              AND (claimed_at > %(after_at)s OR id > %(after_id)s)
              AND NOT coalesce(started_at IS NOT NULL AND finished_at IS NULL AND lease_until > %(now)s, false)
            ORDER BY claimed_at
            OFFSET %(page)s - 1 LIMIT 1),
           %(stale_before)s)
     ORDER BY claimed_at, id
     LIMIT %(page)s)
    UNION
    (SELECT id, entry, claimed_at FROM safebeat_dispatch
     WHERE namespace = %(namespace)s AND task_id IS NOT NULL
       AND started_at IS NOT NULL AND finished_at IS NULL AND lease_until <= %(now)s
       AND claimed_at >= %(after_at)s AND (claimed_at > %(after_at)s OR id > %(after_id)s)
     ORDER BY claimed_at, id
     LIMIT %(page)s)
) AS stale
ORDER BY claimed_at, id
LIMIT %(page)s;

-- name: take_over
-- The stale claims beat chose (stale_claims), claimed again, to be re-published with
-- the same task id: each only while it is still stale, so a row another replica took
-- over meanwhile (its claimed_at is fresh, its lease cleared) is left to it. The lease
-- is cleared, so each dead run is taken once; the delivery of the re-published message
-- takes the run over.
UPDATE safebeat_dispatch AS d
SET claimed_at = %(now)s, attempts = d.attempts + 1, status = 'claimed',
    lease_until = NULL, replica = %(replica)s, host = %(host)s, pid = %(pid)s
WHERE d.id = ANY(%(ids)s::bigint[]) AND d.task_id IS NOT NULL
  AND ((d.status = 'claimed' AND d.claimed_at < %(stale_before)s
        AND NOT coalesce(d.started_at IS NOT NULL AND d.finished_at IS NULL
                         AND d.lease_until > %(now)s, false))
       OR (d.finished_at IS NULL AND d.lease_until <= %(now)s))
RETURNING d.id, d.entry, d.window_at, d.task_id, d.attempts;

-- name: mark_sent
UPDATE safebeat_dispatch
SET status = 'sent', sent_at = clock_timestamp()
WHERE id = ANY(%(ids)s) AND status = 'claimed';

-- name: mark_failed
UPDATE safebeat_dispatch AS d
SET status = 'failed', error = f.error
FROM unnest(%(ids)s::bigint[], %(errors)s::text[]) AS f(id, error)
WHERE d.id = f.id AND d.status = 'claimed';

-- name: heartbeat
INSERT INTO safebeat_replica AS r
    (namespace, replica, host, pid, version, started_at, heartbeat_at, definitions)
VALUES (%(namespace)s, %(replica)s, %(host)s, %(pid)s, %(version)s,
        clock_timestamp(), clock_timestamp(), %(definitions)s)
ON CONFLICT (namespace, replica) DO UPDATE
    SET heartbeat_at = excluded.heartbeat_at,
        version = excluded.version,
        definitions = excluded.definitions;

-- name: alive
-- A heartbeat whose definitions did not change: the row keeps them; no row, no update
-- (the replica then sends them in full).
UPDATE safebeat_replica SET heartbeat_at = clock_timestamp()
WHERE namespace = %(namespace)s AND replica = %(replica)s;

-- name: patch_definitions
-- A heartbeat with the digests that changed: they replace or join the row's definitions
-- and the removed names leave them; no row, no update (the replica then sends them in
-- full).
UPDATE safebeat_replica
SET heartbeat_at = clock_timestamp(), version = %(version)s,
    definitions = (definitions - %(removed)s::text[]) || %(changed)s::jsonb
WHERE namespace = %(namespace)s AND replica = %(replica)s;

-- name: replicas
SELECT replica, host, pid, version, started_at, heartbeat_at, definitions
FROM safebeat_replica
WHERE namespace = %(namespace)s
ORDER BY heartbeat_at DESC;

-- name: heartbeats
SELECT heartbeat_at FROM safebeat_replica WHERE namespace = %(namespace)s
ORDER BY heartbeat_at DESC;

-- name: history
SELECT id, entry, window_at, status, task_id, task_name, reason, skipped_from,
       skipped_count, replica, host, pid, claimed_at, sent_at, attempts, error,
       started_at, finished_at, outcome, runtime, worker, retries, runs, duplicates,
       lease_until
FROM safebeat_dispatch
WHERE namespace = %(namespace)s AND (%(entry)s::text IS NULL OR entry = %(entry)s)
ORDER BY window_at DESC, id DESC
LIMIT %(limit)s;

-- name: prune_dispatches
-- One batch of the rows claimed before `before`, oldest first (by the index on claim
-- times: a batch reads what it deletes). prune runs batch after batch, each in a
-- transaction of its own: a backlog is never one statement, which the statement timeout
-- would end on every pass, so that it never caught up. The ids as an array (computed
-- once) leave the planner one way to the rows, by primary key; with `id IN (...)` it may
-- hash-join them against a scan of the whole table.
DELETE FROM safebeat_dispatch
WHERE id = ANY(ARRAY(
    SELECT id FROM safebeat_dispatch
    WHERE namespace = %(namespace)s AND claimed_at < %(before)s
    ORDER BY claimed_at
    LIMIT %(batch)s
));

-- name: prune_replicas
DELETE FROM safebeat_replica
WHERE namespace = %(namespace)s AND heartbeat_at < %(before)s;

-- name: forget_replica
DELETE FROM safebeat_replica WHERE namespace = %(namespace)s AND replica = %(replica)s;

-- name: namespaces
SELECT DISTINCT namespace FROM safebeat_entry ORDER BY namespace;

-- name: lock_registration
-- Held until a registration commits: one replica at a time writes a namespace's entries
-- (see TickStatements.register); bounded by the transaction's lock_timeout.
SELECT pg_advisory_xact_lock(%(key)s);

-- name: lock_entry_starts
-- Held until the start of a forbid entry's window commits (see start_execution).
SELECT pg_advisory_xact_lock(%(key)s);

-- name: start_execution
-- One statement: concurrent deliveries of one window queue on the row lock, and each
-- decides on the row as the one before it left it, by record_rules.decide_start: run (never
-- started; or it ended asking for a retry and this delivery's retries are higher),
-- takeover (lease expired), defer (lease alive, whatever the retries; or, for `forbid`,
-- another window of the entry runs with a live lease) or duplicate (finished otherwise).
WITH current AS (
    SELECT id,
           CASE WHEN started_at IS NOT NULL AND finished_at IS NOT NULL
                     AND (outcome IS DISTINCT FROM 'retry'
                          OR coalesce(retries, 0) >= %(retries)s) THEN 'duplicate'
                WHEN started_at IS NOT NULL AND finished_at IS NULL
                     AND lease_until > clock_timestamp() THEN 'defer'
                WHEN %(exclusive)s AND EXISTS (
                         SELECT 1 FROM safebeat_dispatch AS o
                         WHERE o.namespace = %(namespace)s AND o.entry = %(entry)s
                           AND o.window_at <> %(window)s
                           AND o.started_at IS NOT NULL AND o.finished_at IS NULL
                           AND o.lease_until > clock_timestamp()) THEN 'defer'
                WHEN started_at IS NULL OR finished_at IS NOT NULL THEN 'run'
                ELSE 'takeover' END AS verdict
    FROM safebeat_dispatch
    WHERE namespace = %(namespace)s AND entry = %(entry)s AND window_at = %(window)s
      AND task_id IS NOT NULL
    FOR UPDATE
)
UPDATE safebeat_dispatch AS d
SET started_at = CASE WHEN c.verdict IN ('run', 'takeover') THEN clock_timestamp()
                      ELSE d.started_at END,
    lease_until = CASE WHEN c.verdict IN ('run', 'takeover')
                       THEN clock_timestamp() + %(lease)s::interval ELSE d.lease_until END,
    worker = CASE WHEN c.verdict IN ('run', 'takeover') THEN %(worker)s ELSE d.worker END,
    retries = CASE WHEN c.verdict IN ('run', 'takeover') THEN %(retries)s ELSE d.retries END,
    finished_at = CASE WHEN c.verdict IN ('run', 'takeover') THEN NULL ELSE d.finished_at END,
    outcome = CASE WHEN c.verdict IN ('run', 'takeover') THEN NULL ELSE d.outcome END,
    runtime = CASE WHEN c.verdict IN ('run', 'takeover') THEN NULL ELSE d.runtime END,
    runs = d.runs + (c.verdict IN ('run', 'takeover'))::integer,
    duplicates = d.duplicates + (c.verdict = 'duplicate')::integer
FROM current AS c
WHERE d.id = c.id
RETURNING c.verdict;

-- name: renew_executions
-- Every run of one worker process in one statement; a run taken over or finished is left.
UPDATE safebeat_dispatch AS d
SET lease_until = clock_timestamp() + %(lease)s::interval
FROM unnest(%(entries)s::text[], %(windows)s::timestamptz[], %(workers)s::text[],
            %(retries)s::integer[]) AS r(entry, window_at, worker, retries)
WHERE d.namespace = %(namespace)s AND d.entry = r.entry AND d.window_at = r.window_at
  AND d.worker = r.worker AND d.retries = r.retries AND d.finished_at IS NULL;

-- name: finish_execution
UPDATE safebeat_dispatch
SET finished_at = clock_timestamp(), outcome = %(outcome)s, runtime = %(runtime)s,
    error = coalesce(%(detail)s::text, error)
WHERE namespace = %(namespace)s AND entry = %(entry)s AND window_at = %(window)s
  AND worker = %(worker)s AND retries = %(retries)s AND finished_at IS NULL;

-- name: claim_effect
-- The effect key: a new key is inserted; an expired one is taken over; a live one wins.
INSERT INTO safebeat_effect AS f (namespace, key, owner, task_id, claimed_at, expires_at)
VALUES (%(namespace)s, %(key)s, %(owner)s, %(task_id)s,
        clock_timestamp(), clock_timestamp() + %(keep_for)s::interval)
ON CONFLICT ON CONSTRAINT safebeat_effect_key DO UPDATE
    SET owner = excluded.owner,
        task_id = excluded.task_id,
        claimed_at = excluded.claimed_at,
        expires_at = excluded.expires_at
    WHERE f.expires_at <= excluded.claimed_at
RETURNING 1;

-- name: release_effect
DELETE FROM safebeat_effect
WHERE namespace = %(namespace)s AND key = %(key)s AND owner = %(owner)s;

-- name: prune_effects
DELETE FROM safebeat_effect
WHERE namespace = %(namespace)s AND expires_at <= clock_timestamp();

-- name: set_paused
-- Resuming clears the end and the note too.
UPDATE safebeat_entry
SET paused = %(paused)s, paused_until = %(until)s, pause_note = %(note)s
WHERE namespace = %(namespace)s AND name = %(name)s;

-- name: forget_entry
-- An entry no code defines any more; its dispatch rows stay, so its windows stay decided.
DELETE FROM safebeat_entry WHERE namespace = %(namespace)s AND name = %(name)s;

-- name: record_audit
INSERT INTO safebeat_audit (namespace, at, actor, action, entry, windows, note)
VALUES (%(namespace)s, clock_timestamp(), %(actor)s, %(action)s, %(entry)s, %(windows)s::jsonb, %(note)s)
RETURNING id, at;

-- name: audit
SELECT id, at, actor, action, entry, windows, note
FROM safebeat_audit
WHERE namespace = %(namespace)s AND (%(entry)s::text IS NULL OR entry = %(entry)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: prune_audit
DELETE FROM safebeat_audit WHERE namespace = %(namespace)s AND at < %(before)s;

-- name: add_runtime_entry
INSERT INTO safebeat_runtime_entry (namespace, name, spec, updated_at)
VALUES (%(namespace)s, %(name)s, %(spec)s, clock_timestamp())
ON CONFLICT (namespace, name) DO NOTHING;

-- name: replace_runtime_entry
UPDATE safebeat_runtime_entry SET spec = %(spec)s, updated_at = clock_timestamp()
WHERE namespace = %(namespace)s AND name = %(name)s;

-- name: delete_runtime_entry
DELETE FROM safebeat_runtime_entry WHERE namespace = %(namespace)s AND name = %(name)s;

-- name: bump_runtime_version
-- In the transaction of the change: a replica that reads the new version sees the change.
INSERT INTO safebeat_counter (namespace, name, value) VALUES (%(namespace)s, 'runtime_entries', 1)
ON CONFLICT (namespace, name) DO UPDATE SET value = safebeat_counter.value + 1;

-- name: runtime_entries
SELECT name, spec FROM safebeat_runtime_entry WHERE namespace = %(namespace)s ORDER BY name;

-- name: runtime_version
SELECT coalesce(max(value), 0) FROM safebeat_counter
WHERE namespace = %(namespace)s AND name = 'runtime_entries';

-- name: release_claims
-- Claims this replica never handed to the transport, handed back: made stale for the
-- take-over rule (stale_claims) at once, so the next replica that ticks re-publishes
-- them. Only while each is still this replica's unsent claim of that attempt: one taken
-- over or recorded since is left alone.
UPDATE safebeat_dispatch AS d
SET claimed_at = clock_timestamp() - %(age)s::interval
FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[]) AS c(id, attempts)
WHERE d.id = c.id AND d.attempts = c.attempts AND d.status = 'claimed'
  AND d.replica = %(replica)s;
